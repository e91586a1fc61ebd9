"""Pictures of what a qkv model does: training curves and attention heatmaps.

Pure Python (NumPy and matplotlib only): this module never imports qkv's compiled extension, so
the ``qkv`` command runs it as a script (``qkv plot``, ``qkv translate --attention-out``) on a
machine where only the CLI is installed.

Library use::

    from qkv import plot
    plot.curves("runs/de-en", out="curves.png")              # loss and dev score vs step and time
                                                             # (a classifier's: its confusion matrix too)
    plot.attention(w, src_pieces, tgt_pieces, out="a.png")   # w: (heads, T, S) or (T, S)

Script use (what the CLI runs)::

    python3 plot.py curves RUN_DIR [--out curves.png]
    python3 plot.py attention FILE.npz|DIR ... --out DIR|FILE.png [--kind cross] [--layer N] [--head N]

The script exits 0 on success (printing what it wrote), 1 with one line ``plot.py: error: ...`` on
bad input, 2 on a usage error (argparse), and 3 when the Python running it lacks matplotlib or
NumPy (the ``qkv`` command then tries another python3, or says how to install them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, Union

try:
    import matplotlib  # noqa: F401  (first, so a python3 without it is named for what it lacks)
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
except ImportError as _missing:
    if __name__ != "__main__":
        raise
    # The qkv CLI reads exit status 3 as "this python3 lacks a module" and may try another python3.
    print(f"plot.py: error: {sys.executable} has no module named '{_missing.name}'", file=sys.stderr)
    sys.exit(3)

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["Metrics", "Confusion", "read_metrics", "curves", "attention", "attention_file", "main"]

METRICS_FILE = "metrics.jsonl"

# Dev scores drawn in the lower panels, with their labels; perplexity is drawn on its own
# (right-hand, logarithmic) axis when another score shares the panel.
_SCORES = (("bleu", "dev BLEU"), ("accuracy", "dev accuracy"), ("macro_f1", "dev macro-F1"))
_PERPLEXITY = ("perplexity", "dev perplexity")
# Fields that must be numbers when present.
_NUMERIC = frozenset(("step", "epoch", "time", "loss", "lr", "grad_norm", "tokens_per_second", "tokens", "perplexity",
                      "bleu", "accuracy", "macro_f1"))


# ---- training curves ------------------------------------------------------------------------


@dataclass
class Confusion:
    """A classifier's dev counts at one validation (metrics.jsonl's ``labels`` and ``confusion``).

    ``counts[g, p]`` is the number of dev lines whose gold label is ``labels[g]`` and whose
    predicted label is ``labels[p]``.
    """

    step: int
    labels: list[str]
    counts: np.ndarray

    def per_label(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each label's precision, recall and F1 = 2 TP / (predicted + gold).

        Precision (recall) is 0 for a label never predicted (never gold); F1 is nan for a label
        neither gold nor predicted, which says nothing (the run's macro-F1 is the mean of the
        others, :meth:`macro_f1`).
        """
        c = np.asarray(self.counts, dtype=float)
        tp, predicted, gold = np.diag(c), c.sum(axis=0), c.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = np.where(predicted > 0, tp / predicted, 0.0)
            recall = np.where(gold > 0, tp / gold, 0.0)
            f1 = np.where(predicted + gold > 0, 2 * tp / (predicted + gold), math.nan)
        return precision, recall, f1

    def macro_f1(self) -> float:
        """The mean F1 over the labels that are gold or predicted (what the run logs as macro_f1)."""
        f1 = self.per_label()[2]
        return float(np.nanmean(f1)) if np.isfinite(f1).any() else math.nan


def _confusion(record: dict[str, Any], where: str) -> Confusion:
    """The labels and confusion counts of a validation record, checked."""
    labels, counts = record.get("labels"), record["confusion"]
    if not isinstance(labels, list) or not labels or not all(isinstance(l, str) for l in labels):
        raise ValueError(f"{where}: \"confusion\" needs \"labels\", a list of label names")
    n = len(labels)
    if (not isinstance(counts, list) or len(counts) != n
            or not all(isinstance(row, list) and len(row) == n for row in counts)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for row in counts for x in row)):
        raise ValueError(f"{where}: \"confusion\" must be {n} rows of {n} counts (one per label), got "
                         f"{json.dumps(counts)[:80]}")
    return Confusion(int(_number(record, "step", where)), list(labels), np.asarray(counts, dtype=np.int64))


@dataclass
class Metrics:
    """The records of one run's ``metrics.jsonl``, column by column.

    ``steps`` holds the training-step records and ``validations`` the validation records, each a
    dict of lists keyed by field name (``"step"``, ``"time"``, ``"loss"``, ...); a field missing
    from a record is ``nan`` in its list. Records are in step order; when a run was resumed from an
    earlier step, the records after it that a crash left behind are dropped (the later ones win).
    """

    path: str
    steps: dict[str, list[float]] = field(default_factory=dict)
    validations: dict[str, list[float]] = field(default_factory=dict)
    # A classifier's dev confusion counts, by validation step (absent for other runs).
    confusions: dict[int, Confusion] = field(default_factory=dict)

    def best_confusion(self) -> Confusion | None:
        """The confusion counts of the best validation (the last one that was best so far, the
        checkpoint in best/), else of the last validation that has them; None when none does."""
        if not self.confusions:
            return None
        steps, best = self.column("validation", "step"), self.column("validation", "best")
        for step in reversed(steps[best == 1.0]):
            if int(step) in self.confusions:
                return self.confusions[int(step)]
        return self.confusions[max(self.confusions)]

    def column(self, kind: str, name: str) -> np.ndarray:
        """One field of the step (``kind="step"``) or validation records as floats (nan = absent)."""
        table = self.steps if kind == "step" else self.validations
        n = len(table.get("step", []))
        return np.asarray(table.get(name, [math.nan] * n), dtype=float)

    def has(self, kind: str, name: str) -> bool:
        """Whether any record of that kind has a finite value of `name`."""
        return bool(np.isfinite(self.column(kind, name)).any())


def _metrics_path(run: PathLike) -> str:
    path = os.fspath(run)
    if os.path.isdir(path):
        path = os.path.join(path, METRICS_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file (is {os.fspath(run)} a qkv training run directory?)")
    elif not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    return path


def _number(record: dict[str, Any], key: str, where: str) -> float:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: \"{key}\" must be a number, got {json.dumps(value)}")
    return float(value)


def read_metrics(run: PathLike) -> Metrics:
    """Reads a run's ``metrics.jsonl`` (or the file itself).

    Each line is one JSON object with ``"event"`` ``"step"`` or ``"validation"`` and a numeric
    ``"step"``; other events are ignored, as are blank lines and an unfinished last line (no
    newline yet: a run writing it). Numeric fields must be numbers.

    Raises:
        FileNotFoundError: `run` does not exist, or is a directory without ``metrics.jsonl``.
        ValueError: a line that is not a JSON object or has a field of the wrong type, naming
            the file and line.
    """
    path = _metrics_path(run)
    rows: dict[str, list[dict[str, float]]] = {"step": [], "validation": []}
    confusions: dict[int, Confusion] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines) and not line.endswith("\n"):
                continue  # the line a running (or killed) training run is writing
            raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
        event = record.get("event")
        if event not in rows:
            continue  # an event this version does not draw
        if "step" not in record:
            raise ValueError(f"{where}: a \"{event}\" record without \"step\"")
        values: dict[str, float] = {}
        for key, value in record.items():
            if key == "event" or (value is None and key != "step"):
                continue  # null: not computed
            if key == "best":
                if not isinstance(value, bool):
                    raise ValueError(f"{where}: \"best\" must be true or false, got {json.dumps(value)}")
                values[key] = 1.0 if value else 0.0
            elif key in _NUMERIC or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                values[key] = _number(record, key, where)
            # other fields (notes, names) are kept out of the columns
        table = rows[event]
        # A resumed run starts again from an earlier step: what was written past it goes.
        while table and table[-1]["step"] >= values["step"]:
            table.pop()
        table.append(values)
        if event == "validation":
            for stale in [s for s in confusions if s >= values["step"]]:
                del confusions[stale]
            if "confusion" in record:
                confusions[int(values["step"])] = _confusion(record, where)
    metrics = Metrics(path, confusions=confusions)
    for event, table in rows.items():
        keys: list[str] = []
        for r in table:
            keys.extend(k for k in r if k not in keys)
        columns = {k: [r.get(k, math.nan) for r in table] for k in keys}
        if event == "step":
            metrics.steps = columns
        else:
            metrics.validations = columns
    return metrics


def _time_unit(max_seconds: float) -> tuple[float, str]:
    if max_seconds >= 3 * 3600:
        return 3600.0, "h"
    if max_seconds >= 3 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _smooth(y: np.ndarray) -> np.ndarray:
    """A centred moving average of about 1/25 of the points (edges use the points they have)."""
    window = max(3, len(y) // 25) | 1
    kernel = np.ones(window)
    finite = np.isfinite(y)
    total = np.convolve(np.where(finite, y, 0.0), kernel, mode="same")
    count = np.convolve(finite.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _wants_log(*series: np.ndarray) -> bool:
    values = np.concatenate([s[np.isfinite(s)] for s in series]) if series else np.array([])
    return values.size > 1 and bool((values > 0).all()) and values.max() / values.min() > 30


def _log_axis(ax: Any) -> None:
    """A logarithmic y-axis labelled 1, 2, 5, 10, 20, ... in plain numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _no_data(ax: Any, message: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", fontsize=12, color="0.4")


def _load_runs(run: PathLike | Sequence[PathLike]) -> list[Metrics]:
    runs = [run] if isinstance(run, (str, os.PathLike)) else list(run)
    if not runs:
        raise ValueError("no training run given")
    loaded = [read_metrics(r) for r in runs]
    for m in loaded:
        if not m.steps.get("step") and not m.validations.get("step"):
            raise ValueError(f"{m.path}: no training records yet (no \"step\" or \"validation\" line)")
    return loaded


def _run_names(runs: Sequence[Metrics]) -> list[str]:
    """Each run's directory name; where two share one, its parent's name too."""
    dirs = [os.path.dirname(os.path.abspath(m.path)) for m in runs]
    names = [os.path.basename(d) for d in dirs]
    return [os.path.join(os.path.basename(os.path.dirname(d)), n) if names.count(n) > 1 else n
            for d, n in zip(dirs, names)]


@dataclass
class _Axis:
    """The x-axis of a column of panels: training step, or training time in `unit`."""

    key: str  # "step" or "time"
    scale: float = 1.0
    unit: str = "s"

    @property
    def label(self) -> str:
        return "training step" if self.key == "step" else f"training time ({self.unit})"

    def of(self, m: Metrics, kind: str) -> np.ndarray:
        return m.column(kind, self.key) / self.scale


def _draw_losses(ax: Any, runs: Sequence[Metrics], names: Sequence[str], x: _Axis) -> None:
    single = len(runs) == 1
    drew = False
    series: list[np.ndarray] = []
    for r, m in enumerate(runs):
        colour_s, colour_v = ("C0", "C3") if single else (f"C{r}", f"C{r}")
        prefix = "" if single else f"{names[r]}: "
        xs, xv = x.of(m, "step"), x.of(m, "validation")
        loss_s, loss_v = m.column("step", "loss"), m.column("validation", "loss")
        series += [loss_s, loss_v]
        best = m.column("validation", "best") == 1.0
        ok = np.isfinite(xs) & np.isfinite(loss_s)
        if ok.any():
            many = ok.sum() >= 50
            marker = "o" if len(m.steps.get("step", [])) <= 40 else None
            label = "training loss" if not many else "training loss (each step)"
            ax.plot(xs[ok], loss_s[ok], color=colour_s, lw=1, alpha=0.35 if many else 1.0, marker=marker, ms=4,
                    label=prefix + label if single or not many else None)
            if many:
                ax.plot(xs[ok], _smooth(loss_s[ok]), color=colour_s, lw=2,
                        label=prefix + ("training loss (moving average)" if single else "training loss"))
            drew = True
        okv = np.isfinite(xv) & np.isfinite(loss_v)
        if okv.any():
            ax.plot(xv[okv], loss_v[okv], color=colour_v, lw=2, marker="o", ms=5, ls="-" if single else "--",
                    label=prefix + "dev loss")
            ax.plot(xv[okv & best], loss_v[okv & best], ls="none", marker="*", ms=14, color=colour_v,
                    markeredgecolor="k", label="best so far" if single or r == 0 else None)
            drew = True
    if drew:
        if _wants_log(*series):
            _log_axis(ax)
        ax.legend(loc="upper right", fontsize=9)
    else:
        _no_data(ax, "no training time recorded" if x.key == "time" else "no losses recorded")
    ax.set_xlabel(x.label)
    ax.set_ylabel("loss (cross-entropy, nats)")
    ax.set_title(f"Loss by {'step' if x.key == 'step' else 'training time'}")
    ax.grid(True, alpha=0.3)


def _draw_scores(ax: Any, runs: Sequence[Metrics], names: Sequence[str], x: _Axis) -> None:
    ax.set_xlabel(x.label)
    ax.set_title(f"Dev score by {'step' if x.key == 'step' else 'training time'}")
    ax.grid(True, alpha=0.3)
    single = len(runs) == 1
    keys = [(k, label) for k, label in _SCORES if any(m.has("validation", k) for m in runs)]
    has_ppl = any(m.has("validation", _PERPLEXITY[0]) for m in runs)
    if not any(m.validations.get("step") for m in runs) or not (keys or has_ppl):
        any_valid = any(m.validations.get("step") for m in runs)
        _no_data(ax, "no validation yet" if not any_valid else "no dev score recorded")
        ax.set_ylabel("dev score")
        return
    handles = []
    pax = (ax.twinx() if keys else ax) if has_ppl else None
    ppl_values: list[np.ndarray] = []
    any_x = False
    for r, m in enumerate(runs):
        xv = x.of(m, "validation")
        any_x = any_x or bool(np.isfinite(xv).any())
        best = m.column("validation", "best") == 1.0
        prefix = "" if single else f"{names[r]}: "
        for i, (key, label) in enumerate(keys):
            y = m.column("validation", key)
            ok = np.isfinite(xv) & np.isfinite(y)
            if not ok.any():
                continue
            colour = f"C{i + 1}" if single else f"C{r}"
            style = "-" if single else ("-", ":", "-.")[i % 3]
            (h,) = ax.plot(xv[ok], y[ok], color=colour, lw=2, ls=style, marker="o", ms=5, label=prefix + label)
            ax.plot(xv[ok & best], y[ok & best], ls="none", marker="*", ms=14, color=colour, markeredgecolor="k")
            handles.append(h)
        if pax is not None:
            y = m.column("validation", "perplexity")
            ok = np.isfinite(xv) & np.isfinite(y)
            if ok.any():
                colour = "C7" if single else f"C{r}"
                (h,) = pax.plot(xv[ok], y[ok], color=colour, lw=2, ls="--" if keys else "-", marker="s", ms=4,
                                label=prefix + _PERPLEXITY[1])
                if not keys:
                    pax.plot(xv[ok & best], y[ok & best], ls="none", marker="*", ms=14, color=colour,
                             markeredgecolor="k")
                handles.append(h)
                ppl_values.append(y[ok])
    if keys:
        ax.set_ylabel(", ".join(label.removeprefix("dev ") for _, label in keys))
    if pax is not None:
        if ppl_values and _wants_log(*ppl_values):
            _log_axis(pax)
        pax.set_ylabel("perplexity" + (" (dashed)" if keys else ""))
    if not any_x:
        _no_data(ax, "no training time recorded")
    ax.legend(handles=handles, loc="best", fontsize=9)


def _draw_optimiser(ax: Any, runs: Sequence[Metrics], names: Sequence[str]) -> None:
    """Learning rate (left axis) and gradient norm before clipping (right axis, dashed) by step."""
    ax.set_xlabel("training step")
    ax.set_title("Learning rate and gradient norm by step")
    ax.grid(True, alpha=0.3)
    single = len(runs) == 1
    has_lr = any(m.has("step", "lr") for m in runs)
    has_norm = any(m.has("step", "grad_norm") for m in runs)
    if not (has_lr or has_norm):
        _no_data(ax, "no learning rate or gradient norm recorded")
        return
    nax = ax.twinx() if has_lr and has_norm else ax
    handles, norms = [], []
    for r, m in enumerate(runs):
        xs = m.column("step", "step")
        prefix = "" if single else f"{names[r]}: "
        lr, norm = m.column("step", "lr"), m.column("step", "grad_norm")
        ok = np.isfinite(xs) & np.isfinite(lr)
        if ok.any():
            (h,) = ax.plot(xs[ok], lr[ok], color="C2" if single else f"C{r}", lw=2, label=prefix + "learning rate")
            handles.append(h)
        ok = np.isfinite(xs) & np.isfinite(norm)
        if ok.any():
            many = ok.sum() >= 50
            y = _smooth(norm[ok]) if many else norm[ok]
            (h,) = nax.plot(xs[ok], y, color="C4" if single else f"C{r}", lw=1.5, ls="--",
                            label=prefix + ("gradient norm (moving average)" if many else "gradient norm"))
            handles.append(h)
            norms.append(norm[ok])
    if has_lr:
        ax.set_ylabel("learning rate")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    if has_norm:
        nax.set_ylabel("gradient norm" + (" (dashed)" if has_lr else ""))
        if _wants_log(*norms):
            _log_axis(nax)
    ax.legend(handles=handles, loc="best", fontsize=9)


def _draw_throughput(ax: Any, runs: Sequence[Metrics], names: Sequence[str]) -> None:
    ax.set_xlabel("training step")
    ax.set_ylabel("tokens / s")
    ax.set_title("Training throughput by step")
    ax.grid(True, alpha=0.3)
    single = len(runs) == 1
    drew = False
    for r, m in enumerate(runs):
        xs, y = m.column("step", "step"), m.column("step", "tokens_per_second")
        ok = np.isfinite(xs) & np.isfinite(y)
        if not ok.any():
            continue
        many = ok.sum() >= 50
        colour = "C5" if single else f"C{r}"
        ax.plot(xs[ok], y[ok], color=colour, lw=1, alpha=0.35 if many else 1.0, marker="o" if ok.sum() <= 40 else None,
                ms=4, label=None if many else ("tokens / s" if single else names[r]))
        if many:
            ax.plot(xs[ok], _smooth(y[ok]), color=colour, lw=2,
                    label="tokens / s (moving average)" if single else names[r])
        drew = True
    if not drew:
        _no_data(ax, "no throughput recorded")
        return
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=9)


def _draw_confusion(fig: Figure, ax: Any, c: Confusion) -> None:
    """The confusion matrix: rows gold, columns predicted, each cell's count written in it and
    coloured by its share of the row (so that a rare label's errors show as plainly as a common
    one's)."""
    n = len(c.labels)
    gold = c.counts.sum(axis=1, keepdims=True)
    share = np.divide(c.counts, gold, out=np.zeros(c.counts.shape), where=gold > 0)
    im = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    fig.colorbar(im, ax=ax, label="share of the gold label's dev lines")
    step = _tick_step(n)
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [c.labels[i] for i in ticks], rotation=45 if max(map(len, c.labels)) > 4 else 0,
                  ha="right" if max(map(len, c.labels)) > 4 else "center")
    ax.set_yticks(ticks, [c.labels[i] for i in ticks])
    if n <= 20:
        for g in range(n):
            for p in range(n):
                ax.text(p, g, str(int(c.counts[g, p])), ha="center", va="center", fontsize=9,
                        color="white" if share[g, p] > 0.6 else "black")
    ax.set_xlabel("predicted label")
    ax.set_ylabel("gold label")
    ax.set_title(f"Dev confusion matrix at step {c.step}")


def _draw_per_label_f1(ax: Any, c: Confusion) -> None:
    """Each label's F1 as a bar, with its precision, recall and dev count; the macro-F1 dashed."""
    precision, recall, f1 = c.per_label()
    gold = c.counts.sum(axis=1)
    y = np.arange(len(c.labels))
    ax.barh(y, np.nan_to_num(f1), color="C1")
    for i in range(len(c.labels)):
        text = "absent" if not np.isfinite(f1[i]) else \
            f"{f1[i]:.3f} (P {precision[i]:.2f}, R {recall[i]:.2f}, {int(gold[i])} dev)"
        ax.text(np.nan_to_num(f1[i]) + 0.01, i, text, va="center", fontsize=8)
    macro = c.macro_f1()
    if np.isfinite(macro):
        ax.axvline(macro, color="k", ls="--", lw=1, label=f"macro-F1 {macro:.3f}")
        ax.legend(loc="lower right", fontsize=9)
    step = _tick_step(len(c.labels))
    ax.set_yticks(y[::step], [c.labels[i] for i in y[::step]])
    ax.set_ylim(len(c.labels) - 0.5, -0.5)  # the first label on top, as in the matrix
    ax.set_xlim(0, 1.45)  # room for the numbers right of a bar of 1
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("F1")
    ax.set_title(f"Per-label F1 at step {c.step}")
    ax.grid(True, axis="x", alpha=0.3)


def curves(run: PathLike | Sequence[PathLike], out: PathLike | None = None, *, title: str | None = None) -> Figure:
    """Draws training runs' curves: a 3 x 2 grid (4 x 2 for a classifier).

    Top row: training loss (every logged step, faint, with a moving average when there are many)
    and dev loss, against step (left) and training time (right). Middle row: the dev scores the runs
    computed: BLEU, accuracy and macro-F1 on the left axis, perplexity on a logarithmic right-hand
    axis (or alone), against step and time. Bottom row: learning rate and gradient norm by step,
    and training throughput (tokens per second). A star marks each validation that was the best so
    far. A run with no validation yet says so in the middle panels. A classifier's run (one run whose
    validations logged ``confusion``) gets a fourth row: the dev confusion matrix of its best
    validation, and each label's F1 with its precision and recall (:class:`Confusion`).

    Several runs are drawn over each other, one colour each, named by their directories (so that
    two settings can be compared at a glance); one run keeps a colour per series.

    Args:
        run: a run directory holding ``metrics.jsonl``, the path of such a file, or a list of them.
        out: when given, the figure is also saved there (PNG, or any format matplotlib knows by
            the extension).
        title: the figure's title; default: the run directory's name and its last step (several
            runs: their names).

    Returns:
        The matplotlib Figure (not attached to pyplot; display it in a notebook as it is).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_metrics`; ValueError also when a file
            holds no step or validation record yet, or no run is given.
    """
    runs = _load_runs(run)
    names = _run_names(runs)
    confusion = runs[0].best_confusion() if len(runs) == 1 else None  # several runs' matrices do not overlay
    extra = 0.0 if confusion is None else 4.0 + 0.15 * max(0, len(confusion.labels) - 10)
    fig = Figure(figsize=(12, 11.5 + extra), dpi=100, layout="constrained")
    axes = fig.subplots(3 if confusion is None else 4, 2)
    times = np.concatenate([np.concatenate([m.column("step", "time"), m.column("validation", "time")]) for m in runs])
    times = times[np.isfinite(times)]
    scale, unit = _time_unit(float(times.max()) if times.size else 0.0)
    for col, x in enumerate((_Axis("step"), _Axis("time", scale, unit))):
        _draw_losses(axes[0, col], runs, names, x)
        _draw_scores(axes[1, col], runs, names, x)
    _draw_optimiser(axes[2, 0], runs, names)
    _draw_throughput(axes[2, 1], runs, names)
    if confusion is not None:
        _draw_confusion(fig, axes[3, 0], confusion)
        _draw_per_label_f1(axes[3, 1], confusion)
    if title is None:
        title = _default_title(runs, names)
    fig.suptitle(title, fontsize=14)
    if out is not None:
        fig.savefig(os.fspath(out))
    return fig


def _default_title(runs: Sequence[Metrics], names: Sequence[str]) -> str:
    if len(runs) > 1:
        return " vs ".join(names) if len(runs) <= 4 else f"{len(runs)} runs: " + ", ".join(names)
    m = runs[0]
    n_steps, n_valid = len(m.steps.get("step", [])), len(m.validations.get("step", []))
    step_s, step_v = m.column("step", "step"), m.column("validation", "step")
    last = int(max(np.nanmax(step_s) if n_steps else 0, np.nanmax(step_v) if n_valid else 0))
    title = f"{names[0]}: {last} step{'s' if last != 1 else ''}"
    if n_valid:
        title += f", {n_valid} validation{'s' if n_valid != 1 else ''}"
    return title


# ---- attention --------------------------------------------------------------------------------


def _tick_step(n: int) -> int:
    """Every label up to 80 pieces; beyond that every k-th, so labels never overlap."""
    return 1 if n <= 80 else math.ceil(n / 80)


def _draw_heatmap(ax: Any, w: np.ndarray, xs: Sequence[str], ys: Sequence[str], vmax: float, fontsize: float,
                  cmap: str) -> Any:
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    kx, ky = _tick_step(len(xs)), _tick_step(len(ys))
    ax.set_xticks(range(0, len(xs), kx))
    ax.set_xticklabels([xs[i] for i in range(0, len(xs), kx)], rotation=90, fontsize=fontsize)
    ax.set_yticks(range(0, len(ys), ky))
    ax.set_yticklabels([ys[i] for i in range(0, len(ys), ky)], fontsize=fontsize)
    ax.tick_params(length=2, pad=1)
    return image


def attention(
    weights: Any,
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    head: int | str | None = None,
    *,
    title: str | None = None,
    xlabel: str = "source (keys)",
    ylabel: str = "target (queries)",
    cmap: str = "viridis",
    columns: int | None = None,
    out: PathLike | None = None,
) -> Figure:
    """Draws attention weights as a heatmap: one head, their mean, or a grid of every head.

    Rows are queries (`target_pieces`, top to bottom), columns are keys (`source_pieces`, left to
    right); a cell is how much that query attends to that key (each row sums to 1). For
    self-attention give the same pieces twice.

    Args:
        weights: (heads, target_len, source_len) or (target_len, source_len), array-like.
        source_pieces: the key tokens, ``source_len`` strings (x-axis tick labels).
        target_pieces: the query tokens, ``target_len`` strings (y-axis tick labels).
        head: None: every head in a grid (one panel for 2-D weights); an int: that head (0-based);
            ``"mean"``: the average over heads.
        title: the figure's title.
        xlabel, ylabel: the axis labels (defaults suit cross-attention).
        cmap: a matplotlib colormap name.
        columns: panels per row of the grid (default: 4, or 2 for more than 40 pieces).
        out: when given, the figure is also saved there (PNG by the extension).

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: weights not 2-D or 3-D, pieces that do not match its shape, a head out of
            range, or non-finite weights.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or 0 in w.shape:
        raise ValueError(f"attention: weights must be (heads, target_len, source_len) or (target_len, source_len), "
                         f"got shape {tuple(np.shape(weights))}")
    heads, t_len, s_len = w.shape
    xs, ys = [str(p) for p in source_pieces], [str(p) for p in target_pieces]
    if len(xs) != s_len or len(ys) != t_len:
        raise ValueError(f"attention: weights of shape {tuple(np.shape(weights))} need {t_len} target and {s_len} "
                         f"source pieces, got {len(ys)} and {len(xs)}")
    if not np.isfinite(w).all():
        raise ValueError("attention: the weights hold NaN or infinite values")
    if head is None:
        panels = [(w[h], f"head {h}") for h in range(heads)] if heads > 1 else [(w[0], None)]
    elif head == "mean":
        panels = [(w.mean(axis=0), f"mean of {heads} heads")]
    elif isinstance(head, (int, np.integer)) and not isinstance(head, bool) and 0 <= head < heads:
        panels = [(w[head], f"head {head}" if heads > 1 else None)]
    else:
        raise ValueError(f"attention: head must be None, 'mean' or in [0, {heads}), got {head!r}")

    ncols = min(len(panels), columns or (4 if max(s_len, t_len) <= 40 else 2))
    nrows = math.ceil(len(panels) / ncols)
    longest = max([len(p) for p in xs + ys] + [1])
    fontsize = 9.0 if max(s_len, t_len) <= 30 else 7.0 if max(s_len, t_len) <= 60 else 5.5
    cell = 0.25 if max(s_len, t_len) <= 30 else 0.16 if max(s_len, t_len) <= 60 else 0.11
    label_room = min(longest, 16) * fontsize / 72 * 0.6 + 0.5
    panel_w = min(max(s_len * cell, 2.0), 12.0) + label_room
    panel_h = min(max(t_len * cell, 1.6), 12.0) + label_room
    fig = Figure(figsize=(ncols * panel_w + 1.2, nrows * panel_h + (0.6 if title else 0.2)), dpi=100,
                 layout="constrained")
    grid = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).reshape(nrows, ncols)
    vmax = max(float(max(p.max() for p, _ in panels)), 1e-6)
    image = None
    for i, ax in enumerate(grid.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        data, name = panels[i]
        image = _draw_heatmap(ax, data, xs, ys, vmax, fontsize, cmap)
        if name:
            ax.set_title(name, fontsize=10)
        if i // ncols == nrows - 1 or i + ncols >= len(panels):
            ax.set_xlabel(xlabel)
        if i % ncols == 0:
            ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=list(grid.flat[: len(panels)]), shrink=0.8, pad=0.01, aspect=30,
                 label="attention weight")
    if title:
        fig.suptitle(title, fontsize=12)
    if out is not None:
        fig.savefig(os.fspath(out))
    return fig


# What an attention file (qkv translate / generate --attention-out) holds, per kind of picture:
# the (layers, heads, T, S) array and the pieces of its keys (x) and queries (y).
_KINDS: dict[str, tuple[str, str, str, str, str]] = {
    # kind: (array, key pieces, query pieces, title, axis labels "keys|queries")
    "cross": ("cross_attention", "source_pieces", "target_pieces", "cross-attention",
              "source (keys)|target (queries)"),
    "decoder_self": ("decoder_self_attention", "decoder_input_pieces", "decoder_input_pieces",
                     "decoder self-attention", "target (keys)|target (queries)"),
    "encoder_self": ("encoder_self_attention", "source_pieces", "source_pieces", "encoder self-attention",
                     "source (keys)|source (queries)"),
    "self": ("self_attention", "pieces", "pieces", "self-attention", "tokens (keys)|tokens (queries)"),
}


def _load_npz(path: str) -> dict[str, np.ndarray]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{path}: not a readable .npz file ({e})") from None


def attention_file(path: PathLike, kind: str | None = None, layer: int | None = None, head: int | str | None = None,
                   out: PathLike | None = None) -> Figure:
    """Draws one layer of an attention file written by ``qkv translate/generate --attention-out``.

    Args:
        path: the ``.npz`` file.
        kind: ``"cross"``, ``"decoder_self"``, ``"encoder_self"`` (translation) or ``"self"``
            (generation); default: cross-attention if the file has it, else self-attention.
        layer: 1-based layer number; default: the last layer.
        head: as :func:`attention`.
        out: where to save the picture.
    """
    data = _load_npz(os.fspath(path))
    kind = kind or _default_kind(data, os.fspath(path))
    array, keys, queries, name, labels = _spec(data, kind, os.fspath(path))
    stack = data[array]
    layer = stack.shape[0] if layer is None else layer
    if not 1 <= layer <= stack.shape[0]:
        raise ValueError(f"{os.fspath(path)}: layer {layer} is not in [1, {stack.shape[0]}]")
    xlabel, ylabel = labels.split("|")
    return attention(stack[layer - 1], list(data[keys]), list(data[queries]), head,
                     title=f"{os.path.basename(os.fspath(path))}: layer {layer} of {stack.shape[0]}, {name}",
                     xlabel=xlabel, ylabel=ylabel, out=out)


def _default_kind(data: dict[str, np.ndarray], path: str) -> str:
    for kind in ("cross", "self"):
        if _KINDS[kind][0] in data:
            return kind
    raise ValueError(f"{path}: holds no cross_attention or self_attention array (not an attention file?)")


def _spec(data: dict[str, np.ndarray], kind: str, path: str) -> tuple[str, str, str, str, str]:
    if kind not in _KINDS:
        raise ValueError(f"unknown attention kind '{kind}' (one of {', '.join(_KINDS)})")
    spec = _KINDS[kind]
    array, keys, queries = spec[0], spec[1], spec[2]
    for name in (array, keys, queries):
        if name not in data:
            raise ValueError(f"{path}: no '{name}' array, so no {spec[3]} picture (kinds here: "
                             f"{', '.join(k for k, s in _KINDS.items() if s[0] in data) or 'none'})")
    stack = data[array]
    if stack.ndim != 4 or stack.shape[2] != len(data[queries]) or stack.shape[3] != len(data[keys]):
        raise ValueError(f"{path}: '{array}' of shape {stack.shape} does not fit (layers, heads, "
                         f"{len(data[queries])}, {len(data[keys])}) from its pieces")
    return spec


def _attention_inputs(paths: Iterable[str]) -> list[str]:
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".npz"))
            if not found:
                raise FileNotFoundError(f"{p}: no .npz attention files in this directory")
            files.extend(found)
        elif not os.path.exists(p):
            raise FileNotFoundError(f"{p}: no such file or directory")
        else:
            files.append(p)
    return files


def _draw_attention_files(args: argparse.Namespace) -> list[str]:
    files = _attention_inputs(args.inputs)
    head: int | str | None = None
    if args.head is not None:
        head = "mean" if args.head == "mean" else int(args.head) if args.head.isdigit() else args.head
    if args.out.lower().endswith(".png"):
        if len(files) != 1:
            raise ValueError(f"--out {args.out}: one picture needs one attention file, got {len(files)} "
                             "(give a directory to draw them all)")
        kind = None if args.kind in (None, "all") else args.kind
        fig = attention_file(files[0], kind, args.layer, head, out=args.out)
        del fig
        return [args.out]
    os.makedirs(args.out, exist_ok=True)
    written: list[str] = []
    for path in files:
        data = _load_npz(path)
        if args.kind == "all":
            kinds = [k for k, s in _KINDS.items() if s[0] in data]
        else:
            kinds = [args.kind or _default_kind(data, path)]
        stem = os.path.splitext(os.path.basename(path))[0]
        for kind in kinds:
            layers = data[_spec(data, kind, path)[0]].shape[0]
            for layer in [args.layer] if args.layer is not None else range(1, layers + 1):
                target = os.path.join(args.out, f"{stem}-{kind.replace('_', '-')}-layer{layer}.png")
                attention_file(path, kind, layer, head, out=target)
                written.append(target)
    return written


# ---- script -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plot.py", description="Pictures of qkv training runs and attention weights.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("curves", help="loss, dev score, learning rate, gradient norm and throughput of runs "
                                      "(a classifier's: its dev confusion matrix and per-label F1 too)")
    c.add_argument("run", nargs="+", help="run directories (holding metrics.jsonl) or metrics.jsonl files; several "
                                          "are drawn over each other")
    c.add_argument("--out", help="picture to write (default: RUN/curves.png; required for several runs)")
    c.add_argument("--title", help="figure title")
    a = sub.add_parser("attention", help="heatmaps of attention files (.npz from --attention-out)")
    a.add_argument("inputs", nargs="+", help=".npz files, or directories of them")
    a.add_argument("--out", required=True, help="a directory (one PNG per file, kind and layer) or one FILE.png")
    a.add_argument("--kind", choices=[*_KINDS, "all"],
                   help="which attention (default: cross if the file has it, else self; 'all': every kind)")
    a.add_argument("--layer", type=int, help="1-based layer (default: every layer; the last for FILE.png)")
    a.add_argument("--head", help="one head (0-based) or 'mean' (default: a grid of every head)")
    for s in (c, a):
        s.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The script's entry point; returns the exit status (0 ok, 1 bad input, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "curves":
            if args.out is None and len(args.run) > 1:
                raise ValueError("several runs: say where the picture goes with --out FILE.png")
            first = args.run[0]
            out = args.out or os.path.join(
                first if os.path.isdir(first) else os.path.dirname(os.path.abspath(first)), "curves.png")
            curves(args.run, out, title=args.title)
            if not args.quiet:
                print(f"wrote {out}")
        else:
            if args.head is not None and args.head != "mean" and not args.head.isdigit():
                raise ValueError(f"--head: expected a head number or 'mean', got '{args.head}'")
            written = _draw_attention_files(args)
            if not args.quiet:
                print(f"wrote {len(written)} picture{'s' if len(written) != 1 else ''} to "
                  f"{args.out if len(written) != 1 else written[0]}")
    except (OSError, ValueError) as e:
        message = str(e) if not isinstance(e, OSError) or not e.filename or e.strerror is None else \
            f"{e.filename}: {e.strerror}"
        print(f"plot.py: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
