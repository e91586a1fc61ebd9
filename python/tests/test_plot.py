"""qkv.plot: training curves and attention heatmaps, checked on the rendered image as a person
would look at it: the PNG has a sensible size, is not blank, and carries its axis labels, tick
labels and legend; bad input is a clear error naming the file and line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imread

from qkv import plot

PLOT_SCRIPT = Path(plot.__file__).resolve()


# ---- helpers ----------------------------------------------------------------------------------


def write_metrics(run: Path, records: list[dict]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    path = run / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def translation_run(run: Path, steps: int = 600, every: int = 200) -> Path:
    records: list[dict] = []
    for s in range(1, steps + 1):
        records.append({"event": "step", "step": s, "epoch": 1 + s // 250, "time": 0.5 * s,
                        "loss": 6 * math.exp(-s / 150) + 2 + 0.1 * math.sin(s), "lr": 5e-4, "grad_norm": 1.2,
                        "tokens_per_second": 5000.0, "tokens": 100 * s})
        if s % every == 0:
            loss = 5 * math.exp(-s / 300) + 2.4
            records.append({"event": "validation", "step": s, "time": 0.5 * s + 3, "loss": loss,
                            "perplexity": math.exp(loss), "bleu": 30 * (1 - math.exp(-s / 400)), "best": True})
    return write_metrics(run, records)


def png_stats(path: Path) -> tuple[int, int, float]:
    """(width, height, pixel standard deviation) of a PNG."""
    image = imread(str(path))
    assert image.ndim == 3, "a colour image"
    return image.shape[1], image.shape[0], float(image[..., :3].std())


def texts(fig: Figure) -> list[str]:
    """Every piece of text on the figure: titles, axis labels, tick labels, legends, notes."""
    found: list[str] = [fig._suptitle.get_text()] if fig._suptitle else []
    for ax in fig.axes:
        found += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        found += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        found += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend:
            found += [t.get_text() for t in legend.get_texts()]
    return [t for t in found if t]


def rendered(fig: Figure) -> Figure:
    """Draws the figure so tick labels exist (they are made at draw time)."""
    FigureCanvasAgg(fig).draw()
    return fig


# ---- curves -----------------------------------------------------------------------------------


def test_curves_draws_loss_and_dev_score_against_step_and_time(tmp_path: Path) -> None:
    translation_run(tmp_path / "run")
    out = tmp_path / "curves.png"
    fig = rendered(plot.curves(tmp_path / "run", out=out))
    assert isinstance(fig, Figure)
    width, height, spread = png_stats(out)
    assert (width, height) == (1200, 1150)
    assert spread > 0.05, "the picture is not blank"
    words = texts(fig)
    assert "training step" in words
    assert any(w.startswith("training time (") for w in words)
    assert "loss (cross-entropy, nats)" in words
    for label in ("training loss (each step)", "training loss (moving average)", "dev loss", "dev BLEU",
                  "dev perplexity", "best so far"):
        assert label in words, label
    assert any("600 steps, 3 validations" in w for w in words)
    for label in ("learning rate", "gradient norm (moving average)", "tokens / s (moving average)",
                  "Learning rate and gradient norm by step", "Training throughput by step"):
        assert label in words, label
    # six panels with numbered ticks (more y-axes for perplexity and the gradient norm)
    main_axes = [ax for ax in fig.axes if ax.get_title()]
    assert len(main_axes) == 6
    for ax in main_axes:
        assert any(t.get_text() for t in ax.get_xticklabels()), ax.get_title()


def test_curves_accepts_the_metrics_file_itself(tmp_path: Path) -> None:
    path = translation_run(tmp_path / "run")
    fig = plot.curves(path)
    assert len([ax for ax in fig.axes if ax.get_title()]) == 6


def test_several_runs_are_drawn_over_each_other_named_by_directory(tmp_path: Path) -> None:
    translation_run(tmp_path / "base", steps=300, every=100)
    translation_run(tmp_path / "big", steps=200, every=100)
    out = tmp_path / "both.png"
    fig = rendered(plot.curves([tmp_path / "base", tmp_path / "big"], out))
    words = texts(fig)
    for label in ("base: dev loss", "big: dev loss", "base: dev BLEU", "big: dev BLEU", "base: learning rate",
                  "big: learning rate", "base", "big"):
        assert label in words, label
    assert fig._suptitle.get_text() == "base vs big"
    # one colour per run: the two runs' dev-loss lines differ in colour
    loss_ax = fig.axes[0]
    colours = {line.get_label(): line.get_color() for line in loss_ax.get_lines()}
    assert colours["base: dev loss"] != colours["big: dev loss"]
    assert png_stats(out)[2] > 0.05
    # runs of the same directory name are told apart by their parents
    translation_run(tmp_path / "a" / "run", steps=60, every=30)
    translation_run(tmp_path / "b" / "run", steps=60, every=30)
    words = texts(rendered(plot.curves([tmp_path / "a" / "run", tmp_path / "b" / "run"])))
    assert "a/run: dev loss" in words and "b/run: dev loss" in words
    with pytest.raises(ValueError, match="no training run given"):
        plot.curves([])


def test_a_run_without_validation_says_so(tmp_path: Path) -> None:
    write_metrics(tmp_path / "run", [{"event": "step", "step": s, "time": s * 0.1, "loss": 3.0 / s}
                                     for s in range(1, 30)])
    out = tmp_path / "c.png"
    words = texts(rendered(plot.curves(tmp_path / "run", out)))
    assert words.count("no validation yet") == 2
    assert "training loss" in words
    assert png_stats(out)[2] > 0.05


def test_a_single_point_is_visible(tmp_path: Path) -> None:
    write_metrics(tmp_path / "run", [{"event": "step", "step": 1, "epoch": 1, "time": 0.4, "loss": 8.5}])
    fig = rendered(plot.curves(tmp_path / "run", tmp_path / "c.png"))
    line = fig.axes[0].get_lines()[0]
    assert line.get_marker() == "o", "one point needs a marker to be seen"
    assert any("1 step" in w for w in texts(fig))


def test_missing_optional_fields(tmp_path: Path) -> None:
    # no time, no epoch, no scores beyond the dev loss: the time panels say so, nothing fails
    write_metrics(tmp_path / "run", [
        {"event": "step", "step": 1, "loss": 4.0},
        {"event": "step", "step": 2, "loss": 3.5},
        {"event": "validation", "step": 2, "loss": 3.9},
    ])
    words = texts(rendered(plot.curves(tmp_path / "run", tmp_path / "c.png")))
    assert "no training time recorded" in words
    assert "no dev score recorded" in words


def test_classification_scores_and_language_model_perplexity(tmp_path: Path) -> None:
    write_metrics(tmp_path / "cls", [
        {"event": "step", "step": 1, "time": 1.0, "loss": 2.0},
        {"event": "validation", "step": 1, "time": 2.0, "loss": 1.9, "accuracy": 0.4, "macro_f1": 0.3, "best": True},
        {"event": "step", "step": 2, "time": 3.0, "loss": 1.5},
        {"event": "validation", "step": 2, "time": 4.0, "loss": 1.7, "accuracy": 0.5, "macro_f1": 0.35, "best": True},
    ])
    words = texts(rendered(plot.curves(tmp_path / "cls")))
    assert "dev accuracy" in words and "dev macro-F1" in words and "dev BLEU" not in words
    write_metrics(tmp_path / "lm", [
        {"event": "step", "step": 10, "time": 1.0, "loss": 6.0},
        {"event": "validation", "step": 10, "time": 2.0, "loss": 5.0, "perplexity": 148.4, "best": True},
    ])
    words = texts(rendered(plot.curves(tmp_path / "lm")))
    assert "dev perplexity" in words and "perplexity" in words


# gold x x y z, predicted x y y y (tests/train/encoder_training_test.cpp's case): label x has
# P 1/1, R 1/2, F1 2/3; y P 1/3, R 1/1, F1 1/2; z P 0, R 0, F1 0; macro-F1 (2/3 + 1/2 + 0) / 3.
HAND_CONFUSION = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]


def classifier_run(run: Path) -> Path:
    return write_metrics(run, [
        {"event": "step", "step": 1, "time": 1.0, "loss": 2.0},
        {"event": "validation", "step": 1, "time": 2.0, "loss": 1.9, "accuracy": 0.5, "macro_f1": 7 / 18,
         "best": True, "labels": ["x", "y", "z"], "confusion": HAND_CONFUSION},
        {"event": "step", "step": 2, "time": 3.0, "loss": 1.5},
        # worse than step 1: the picture shows the best validation's matrix, step 1's
        {"event": "validation", "step": 2, "time": 4.0, "loss": 1.7, "accuracy": 0.25, "macro_f1": 0.1,
         "best": False, "labels": ["x", "y", "z"], "confusion": [[0, 2, 0], [0, 1, 0], [0, 1, 0]]},
    ])


def test_per_label_scores_of_a_hand_computed_confusion_matrix() -> None:
    c = plot.Confusion(1, ["x", "y", "z"], np.array(HAND_CONFUSION))
    precision, recall, f1 = c.per_label()
    np.testing.assert_allclose(precision, [1.0, 1 / 3, 0.0])
    np.testing.assert_allclose(recall, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(f1, [2 / 3, 0.5, 0.0])
    assert c.macro_f1() == pytest.approx(7 / 18)
    # A label neither gold nor predicted says nothing: nan, left out of the macro-F1 (as qkv train).
    absent = plot.Confusion(1, ["x", "y", "w"], np.array([[2, 0, 0], [1, 1, 0], [0, 0, 0]]))
    assert np.isnan(absent.per_label()[2][2])
    assert absent.macro_f1() == pytest.approx((0.8 + 2 / 3) / 2)


def test_a_classifier_run_gets_its_confusion_matrix_and_per_label_f1(tmp_path: Path) -> None:
    classifier_run(tmp_path / "cls")
    m = plot.read_metrics(tmp_path / "cls")
    assert sorted(m.confusions) == [1, 2] and m.best_confusion().step == 1
    fig = rendered(plot.curves(tmp_path / "cls", out=tmp_path / "cls.png"))
    assert len([ax for ax in fig.axes if ax.get_title()]) == 8  # 4 x 2 panels (twin axes and the colour bar: untitled)
    words = texts(fig)
    assert "Dev confusion matrix at step 1" in words and "Per-label F1 at step 1" in words
    assert "predicted label" in words and "gold label" in words and {"x", "y", "z"} <= set(words)
    assert "0.667 (P 1.00, R 0.50, 2 dev)" in words
    assert "0.500 (P 0.33, R 1.00, 1 dev)" in words
    assert "0.000 (P 0.00, R 0.00, 1 dev)" in words
    assert "macro-F1 0.389" in words
    matrix = next(ax for ax in fig.axes if ax.get_title().startswith("Dev confusion"))
    assert [t.get_text() for t in matrix.texts] == ["1", "1", "0", "0", "1", "0", "0", "1", "0"]
    width, height, spread = png_stats(tmp_path / "cls.png")
    assert (width, height) == (1200, 1550) and spread > 0.05
    # Several runs are compared by their curves: no matrix.
    classifier_run(tmp_path / "other")
    fig = rendered(plot.curves([tmp_path / "cls", tmp_path / "other"]))
    assert not any(ax.get_title().startswith("Dev confusion") for ax in fig.axes)


@pytest.mark.parametrize("fields, message", [
    ('"confusion": [[1, 0], [0, 1]]', '"confusion" needs "labels"'),
    ('"labels": ["a", "b"], "confusion": [[1, 0]]', '"confusion" must be 2 rows of 2 counts'),
    ('"labels": ["a", "b"], "confusion": [[1, -1], [0, 1]]', '"confusion" must be 2 rows of 2 counts'),
])
def test_a_bad_confusion_matrix_is_named_with_file_and_line(tmp_path: Path, fields: str, message: str) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"event": "validation", "step": 1, "loss": 1.0, ' + fields + "}\n")
    with pytest.raises(ValueError, match=f"metrics.jsonl:1: {message}"):
        plot.read_metrics(tmp_path)


def test_a_resumed_run_keeps_the_records_written_after_the_resume(tmp_path: Path) -> None:
    write_metrics(tmp_path / "run", [
        {"event": "step", "step": 1, "time": 1.0, "loss": 5.0},
        {"event": "step", "step": 2, "time": 2.0, "loss": 4.0},
        {"event": "step", "step": 3, "time": 3.0, "loss": 9.0},  # lost when the run was killed
        {"event": "step", "step": 3, "time": 3.5, "loss": 3.0},  # the resumed run
        {"event": "step", "step": 4, "time": 4.5, "loss": 2.0},
    ])
    m = plot.read_metrics(tmp_path / "run")
    assert list(m.column("step", "step")) == [1, 2, 3, 4]
    assert list(m.column("step", "loss")) == [5.0, 4.0, 3.0, 2.0]


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"event": "step", "loss": 1.0}', 'a "step" record without "step"'),
    ('{"event": "step", "step": 3, "loss": "low"}', '"loss" must be a number, got "low"'),
    ('{"event": "validation", "step": 3, "loss": 1.0, "best": 1}', '"best" must be true or false'),
])
def test_a_bad_line_is_named_with_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"event": "step", "step": 1, "loss": 2.0}\n\n' + line + "\n")
    with pytest.raises(ValueError) as e:
        plot.curves(run)
    assert f"{run / 'metrics.jsonl'}:3: " in str(e.value)
    assert message in str(e.value)


def test_a_line_being_written_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"event": "step", "step": 1, "loss": 2.0}\n{"event": "st')
    assert list(plot.read_metrics(tmp_path).column("step", "loss")) == [2.0]


def test_metrics_written_by_qkv_train(tmp_path: Path) -> None:
    # the lines of train/metrics_log.h, as a translation run writes them
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"event":"step","step":50,"epoch":1,"time":6.773338212,"loss":4.706074981689453,"lr":0.001,'
        '"grad_norm":0.9395237904956204,"tokens_per_second":11375.188809948973,"tokens":77048}\n'
        '{"event":"validation","step":50,"time":6.773338212,"loss":0.62,"perplexity":1.86,"best":true,'
        '"bleu":14.16}\n')
    words = texts(rendered(plot.curves(tmp_path)))
    assert "dev BLEU" in words and "dev perplexity" in words and "training loss" in words


def test_missing_files_and_empty_runs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="metrics.jsonl: no such file"):
        plot.curves(tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere: no such file"):
        plot.curves(tmp_path / "nowhere")
    (tmp_path / "metrics.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no training records yet"):
        plot.curves(tmp_path)


# ---- attention --------------------------------------------------------------------------------


def random_attention(heads: int, t: int, s: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(heads, t, s))
    logits[:, np.arange(t), np.minimum(np.arange(t), s - 1)] += 4  # a diagonal, as an alignment
    w = np.exp(logits)
    return w / w.sum(-1, keepdims=True)


SRC = ["▁En", "▁el", "▁principio", "▁era", "▁el", "▁Verbo", ".", "</s>"]
TGT = ["▁In", "▁the", "▁beginning", "▁was", "▁the", "▁Word", ".", "</s>"]


def test_attention_grid_of_heads_has_pieces_as_tick_labels(tmp_path: Path) -> None:
    out = tmp_path / "a.png"
    fig = rendered(plot.attention(random_attention(4, len(TGT), len(SRC)), SRC, TGT, title="layer 2, cross",
                                  out=out))
    width, height, spread = png_stats(out)
    assert width > 600 and height > 200 and width < 4000
    assert spread > 0.05
    panels = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2", "head 3"]
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == SRC
        assert [t.get_text() for t in ax.get_yticklabels()] == TGT
    words = texts(fig)
    assert "source (keys)" in words and "target (queries)" in words and "layer 2, cross" in words
    assert "attention weight" in words  # the colour bar


def test_attention_one_head_mean_and_two_dimensional_weights(tmp_path: Path) -> None:
    w = random_attention(3, len(TGT), len(SRC))
    fig = plot.attention(w, SRC, TGT, head=2)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["head 2"]
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), w[2])
    fig = plot.attention(w, SRC, TGT, head="mean")
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), w.mean(0))
    out = tmp_path / "one.png"
    fig = rendered(plot.attention(w[0], SRC, TGT, out=out))
    assert len(fig.axes[0].images) == 1 and png_stats(out)[2] > 0.05


def test_self_attention_uses_the_same_pieces_on_both_axes(tmp_path: Path) -> None:
    w = np.tril(np.ones((len(TGT), len(TGT))))
    w /= w.sum(-1, keepdims=True)
    fig = rendered(plot.attention(w, TGT, TGT, xlabel="keys", ylabel="queries", out=tmp_path / "s.png"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == TGT == [t.get_text() for t in ax.get_yticklabels()]


def test_long_sequences_thin_their_tick_labels(tmp_path: Path) -> None:
    pieces = [f"▁w{i}" for i in range(200)]
    fig = rendered(plot.attention(random_attention(1, 200, 200), pieces, pieces, out=tmp_path / "l.png"))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert 50 <= len(labels) <= 80 and labels[0] == "▁w0" and labels[1] == "▁w3"


@pytest.mark.parametrize("call, message", [
    (lambda: plot.attention(np.ones((2, 3)), ["a"] * 2, ["b"] * 2), "need 2 target and 3 source pieces"),
    (lambda: plot.attention(np.ones(3), ["a"] * 3, ["b"]), "must be (heads, target_len, source_len)"),
    (lambda: plot.attention(np.ones((2, 1, 1)), ["a"], ["b"], head=2), "head must be None, 'mean' or in [0, 2)"),
    (lambda: plot.attention(np.full((1, 1), np.nan), ["a"], ["b"]), "NaN"),
])
def test_attention_refuses_what_does_not_fit(call, message: str) -> None:
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value)


def write_translation_npz(path: Path, layers: int = 2, heads: int = 2) -> None:
    dec_in = ["<s>"] + TGT[:-1]
    np.savez(path,
             source_pieces=np.array(SRC), target_pieces=np.array(TGT), decoder_input_pieces=np.array(dec_in),
             cross_attention=np.stack([random_attention(heads, len(TGT), len(SRC), i) for i in range(layers)]),
             decoder_self_attention=np.stack([random_attention(heads, len(TGT), len(TGT), i) for i in range(layers)]),
             encoder_self_attention=np.stack([random_attention(heads, len(SRC), len(SRC), i) for i in range(layers)]))


def test_attention_file_picks_a_kind_and_a_layer(tmp_path: Path) -> None:
    write_translation_npz(tmp_path / "0001.npz", layers=3)
    fig = rendered(plot.attention_file(tmp_path / "0001.npz"))
    assert any("layer 3 of 3, cross-attention" in w for w in texts(fig))
    fig = rendered(plot.attention_file(tmp_path / "0001.npz", "decoder_self", layer=1, head=0))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<s>"] + TGT[:-1]
    with pytest.raises(ValueError, match=r"layer 4 is not in \[1, 3\]"):
        plot.attention_file(tmp_path / "0001.npz", layer=4)
    with pytest.raises(ValueError, match="no 'self_attention' array"):
        plot.attention_file(tmp_path / "0001.npz", "self")


# ---- the script (what the qkv CLI runs) -------------------------------------------------------


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PLOT_SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_script_curves(tmp_path: Path) -> None:
    translation_run(tmp_path / "run")
    r = run_script("curves", str(tmp_path / "run"), "--out", str(tmp_path / "c.png"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote {tmp_path / 'c.png'}\n"
    assert png_stats(tmp_path / "c.png")[2] > 0.05
    r = run_script("curves", str(tmp_path / "run"))  # default: RUN/curves.png
    assert r.returncode == 0 and (tmp_path / "run" / "curves.png").exists()
    translation_run(tmp_path / "other", steps=100, every=50)
    r = run_script("curves", str(tmp_path / "run"), str(tmp_path / "other"), "--out", str(tmp_path / "both.png"))
    assert r.returncode == 0, r.stderr
    assert png_stats(tmp_path / "both.png")[2] > 0.05
    r = run_script("curves", str(tmp_path / "run"), str(tmp_path / "other"))
    assert r.returncode == 1 and "several runs: say where the picture goes with --out" in r.stderr


def test_script_errors_are_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"event": "step", "step": 1, "loss": 2.0}\nnonsense\n')
    r = run_script("curves", str(tmp_path), "--out", str(tmp_path / "c.png"))
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("plot.py: error: ")
    assert f"{tmp_path / 'metrics.jsonl'}:2: not valid JSON" in r.stderr
    r = run_script("curves", str(tmp_path / "missing"))
    assert r.returncode == 1 and "missing: no such file" in r.stderr
    r = run_script("attention", str(tmp_path / "none.npz"), "--out", str(tmp_path / "x"))
    assert r.returncode == 1 and "none.npz: no such file" in r.stderr
    (tmp_path / "bad.npz").write_text("not a zip")
    r = run_script("attention", str(tmp_path / "bad.npz"), "--out", str(tmp_path / "x"))
    assert r.returncode == 1 and "bad.npz: not a readable .npz file" in r.stderr
    assert run_script("nothing").returncode == 2  # usage


def test_script_attention_writes_one_png_per_file_kind_and_layer(tmp_path: Path) -> None:
    write_translation_npz(tmp_path / "0001.npz")
    write_translation_npz(tmp_path / "0002.npz")
    r = run_script("attention", str(tmp_path), "--out", str(tmp_path / "pics"))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "pics")) == [
        "0001-cross-layer1.png", "0001-cross-layer2.png", "0002-cross-layer1.png", "0002-cross-layer2.png"]
    r = run_script("attention", str(tmp_path / "0001.npz"), "--out", str(tmp_path / "all"), "--kind", "all")
    assert r.returncode == 0, r.stderr
    assert len(os.listdir(tmp_path / "all")) == 6
    r = run_script("attention", str(tmp_path / "0001.npz"), "--out", str(tmp_path / "one.png"), "--layer", "1",
                   "--head", "mean")
    assert r.returncode == 0, r.stderr
    assert png_stats(tmp_path / "one.png")[2] > 0.05
    r = run_script("attention", str(tmp_path), "--out", str(tmp_path / "two.png"))
    assert r.returncode == 1 and "one picture needs one attention file, got 2" in r.stderr


def test_plot_does_not_import_the_compiled_extension() -> None:
    code = ("import sys, runpy; sys.argv = ['plot.py', '--help']\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "assert not [m for m in sys.modules if m.startswith('qkv')], sorted(sys.modules)\n" % str(PLOT_SCRIPT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    source = PLOT_SCRIPT.read_text()
    assert "_core" not in source and "import qkv" not in source
