"""qkv.Trainer: the CLI's run from Python, bit for bit; callbacks; Ctrl-C; the GIL."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

import qkv
from conftest import TINY_MODEL, run_qkv

FLAGS = {"arch": "decoder-only", "spm_vocab": 360, "block_size": 32, "batch_size": 8, "lr": 3e-3, "warmup": 5,
         "valid_every": 10, "d_model": 16, "heads": 2, "layers": 1, "d_ff": 32, "threads": 1}


def cli_args(flags: dict) -> list[str]:
    args = []
    for k, v in flags.items():
        if k in ("d_model", "heads", "layers", "d_ff", "threads"):
            continue  # in TINY_MODEL
        args += ["--" + k.replace("_", "-"), str(v)]
    return args + TINY_MODEL


def test_twenty_steps_from_python_equal_the_cli_bit_for_bit(data_dir, tmp_path):
    text = str(data_dir / "text.txt")
    run_qkv("train", "--text", text, "--valid-text", text, "--output-dir", str(tmp_path / "cli"), "--steps", "20",
            "--log-every", "1", *cli_args(FLAGS))
    seen = []
    trainer = qkv.Trainer(text=text, valid_text=text, output_dir=str(tmp_path / "py"), steps=20, log_every=1, **FLAGS)
    result = trainer.fit(callback=seen.append)
    assert result["step"] == 20 and not result["interrupted"]
    assert result["last_checkpoint"] == str(tmp_path / "py" / "last")
    for f in ("model.safetensors", "optimizer.safetensors"):
        assert (tmp_path / "cli" / "last" / f).read_bytes() == (tmp_path / "py" / "last" / f).read_bytes(), f
    steps = [m["step"] for m in seen if m["event"] == "step"]
    assert steps == list(range(1, 21))  # the callback sees every step
    validations = [m for m in seen if m["event"] == "validation"]
    assert [v["step"] for v in validations] == [10, 20]
    assert all(k in validations[0] for k in ("loss", "perplexity", "best", "time"))
    assert all(k in seen[0] for k in ("loss", "lr", "grad_norm", "tokens_per_second", "epoch", "time"))
    # metrics.jsonl holds the same reports.
    lines = [json.loads(l) for l in (tmp_path / "py" / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines if l["event"] == "step"] == steps
    assert [l["loss"] for l in lines if l["event"] == "step"] == [m["loss"] for m in seen if m["event"] == "step"]


def test_ctrl_c_saves_the_last_checkpoint_and_raises_keyboard_interrupt(data_dir, tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    out = tmp_path / "run"
    trainer = qkv.Trainer(text=str(data_dir / "text.txt"), output_dir=str(out), steps=1000, log_every=1, **FLAGS)

    def interrupt_at_step_3(metrics):
        if metrics["event"] == "step" and metrics["step"] == 3:
            os.kill(os.getpid(), signal.SIGINT)

    # Python's own handler before fit, whatever the runner left (a job started in the background by
    # a shell without job control inherits SIGINT ignored).
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.fit(callback=interrupt_at_step_3)
        # Python's own Ctrl-C handling is back after fit.
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, runner_handler)
    state = json.loads((out / "last" / "train_state.json").read_text())
    assert 3 <= state["step"] <= 4
    # And the run resumes where it stopped.
    resumed = qkv.Trainer(text=str(data_dir / "text.txt"), resume=str(out), steps=state["step"] + 2, log_every=1,
                          **FLAGS)
    assert resumed.fit()["step"] == state["step"] + 2


def test_an_exception_in_the_callback_stops_training_and_is_raised(data_dir, tmp_path):
    trainer = qkv.Trainer(text=str(data_dir / "text.txt"), output_dir=str(tmp_path / "run"), steps=50, log_every=1, **FLAGS)

    def fail(metrics):
        if metrics["step"] == 2:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        trainer.fit(callback=fail)
    state = json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())
    assert state["step"] <= 3


def test_the_gil_is_released_while_training(data_dir, tmp_path):
    ticks = 0
    running = True

    def count():
        nonlocal ticks
        while running:
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        # No callback: if fit held the GIL, the counting thread could not run until it returned.
        before = ticks
        qkv.Trainer(text=str(data_dir / "text.txt"), output_dir=str(tmp_path / "run"), steps=15, log_every=1000,
                    **FLAGS).fit()
        during = ticks - before
    finally:
        running = False
        t.join()
    assert during > 1000


def test_bad_flags_are_errors_naming_the_flag(data_dir, tmp_path):
    with pytest.raises(ValueError, match="learning rate must be positive"):
        qkv.Trainer(text=str(data_dir / "text.txt"), output_dir=str(tmp_path / "r"), steps=1, **{**FLAGS, "lr": -1.0}).fit()
    with pytest.raises(FileNotFoundError):
        qkv.Trainer(text=str(tmp_path / "missing.txt"), output_dir=str(tmp_path / "r2"), steps=1, **FLAGS).fit()


def test_bf16_precision_from_python_equals_the_cli_is_recorded_and_kept_on_resume(data_dir, tmp_path):
    text = str(data_dir / "text.txt")
    flags = dict(FLAGS, valid_every=0)
    run_qkv("train", "--text", text, "--output-dir", str(tmp_path / "cli"), "--steps", "6", "--precision", "bf16",
            *cli_args(flags))
    qkv.Trainer(text=text, output_dir=str(tmp_path / "py"), steps=6, precision="bf16", **flags).fit()
    qkv.Trainer(text=text, output_dir=str(tmp_path / "f32"), steps=6, **flags).fit()
    weights = {d: (tmp_path / d / "last" / "model.safetensors").read_bytes() for d in ("cli", "py", "f32")}
    assert weights["cli"] == weights["py"]
    assert weights["py"] != weights["f32"]  # the bf16 products ran
    state = json.loads((tmp_path / "py" / "last" / "train_state.json").read_text())
    assert state["hyper"]["precision"] == "bf16"
    assert json.loads((tmp_path / "f32" / "last" / "train_state.json").read_text())["hyper"]["precision"] == "float32"
    qkv.Trainer(text=text, resume=str(tmp_path / "py"), steps=8, **flags).fit()  # no precision given: the run's
    state = json.loads((tmp_path / "py" / "last" / "train_state.json").read_text())
    assert state["step"] == 8 and state["hyper"]["precision"] == "bf16"
    with pytest.raises(ValueError, match="precision"):
        qkv.Trainer(text=text, output_dir=str(tmp_path / "bad"), steps=1, precision="fp16", **flags).fit()
