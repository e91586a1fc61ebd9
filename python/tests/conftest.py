"""Fixtures of the Python tests: the qkv CLI (to compare with), and small checkpoints of each
family trained by it in a few seconds on text made here."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from toy_text import SPANISH, sentences, write_lines  # noqa: F401 (the tests import them from here)

REPO = Path(__file__).resolve().parents[2]


def qkv_bin() -> str:
    return os.environ.get("QKV_BIN", str(REPO / "build" / "qkv"))


def run_qkv(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([qkv_bin(), *args], input=input, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"qkv {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return r


TINY_MODEL = ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--threads", "1"]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    en = sentences(300, 1)
    write_lines(d / "train.en", en)
    write_lines(d / "train.es", [" ".join(SPANISH.get(w, w) for w in s.split()) for s in en])
    write_lines(d / "text.txt", sentences(200, 2))
    return d


@pytest.fixture(scope="session")
def translation_checkpoint(data_dir, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("mt") / "run"
    run_qkv("train", "--src", str(data_dir / "train.es"), "--tgt", str(data_dir / "train.en"), "--output-dir", str(out),
            "--spm-vocab", "360", "--max-seq-length", "48", "--max-batch-tokens", "400", "--steps", "40", "--lr", "3e-3",
            "--warmup", "5", "--log-every", "40", "--valid-every", "0", *TINY_MODEL)
    return str(out / "last")


@pytest.fixture(scope="session")
def lm_checkpoint(data_dir, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("lm") / "run"
    run_qkv("train", "--arch", "decoder-only", "--text", str(data_dir / "text.txt"), "--output-dir", str(out),
            "--spm-vocab", "360", "--block-size", "32", "--batch-size", "8", "--steps", "40", "--lr", "3e-3",
            "--warmup", "5", "--log-every", "40", "--valid-every", "0", *TINY_MODEL)
    return str(out / "last")


@pytest.fixture(scope="session")
def encoder_checkpoint(data_dir, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("mlm") / "run"
    run_qkv("train", "--arch", "encoder-only", "--objective", "mlm", "--text", str(data_dir / "text.txt"),
            "--output-dir", str(out), "--spm-vocab", "360", "--block-size", "32", "--batch-size", "8", "--steps", "5",
            "--log-every", "5", "--valid-every", "0", *TINY_MODEL)
    return str(out / "last")
