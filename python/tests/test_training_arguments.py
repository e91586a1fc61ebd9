"""qkv.TrainingArguments: every `qkv train` flag as a typed field; wrong types and unknown keywords
are TypeErrors naming the keyword; the library's errors name the keyword beside the flag."""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

import qkv
from conftest import qkv_bin
from qkv.training import RENAMED


def test_every_train_flag_is_a_field_and_every_field_a_flag():
    help_text = subprocess.run([qkv_bin(), "train", "--help"], capture_output=True, text=True).stdout
    flags = {m.replace("-", "_") for m in re.findall(r"^\s+--([\w-]+)", help_text, re.M)} - {"help"}
    cli_only = {"device", "quiet", "dist_timeout", "allreduce_bucket_mb", "no_overlap", "allreduce"}  # the CLI's own
    fields = {f.name for f in dataclasses.fields(qkv.TrainingArguments)}
    assert fields == flags - cli_only


def test_wrong_types_name_the_keyword():
    with pytest.raises(TypeError, match=r"steps='3' is not an int"):
        qkv.TrainingArguments(steps="3")
    with pytest.raises(TypeError, match=r"lr='fast' is not a number"):
        qkv.TrainingArguments(lr="fast")
    with pytest.raises(TypeError, match=r"synthetic=1 is not a bool"):
        qkv.TrainingArguments(synthetic=1)
    with pytest.raises(TypeError, match=r"batch_size=True is not an int"):
        qkv.Trainer(batch_size=True)
    assert qkv.TrainingArguments(lr=1, text=Path("t.txt")).flags() == {"lr": 1.0, "text": "t.txt"}


def test_unknown_keywords_suggest_the_nearest():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'valid_evry' \(did you mean valid_every=\?\)"):
        qkv.Trainer(valid_evry=3)
    with pytest.raises(TypeError, match=r"expected a TrainingArguments"):
        qkv.Trainer({"steps": 3})


def test_library_errors_name_the_keyword(tmp_path):
    with pytest.raises(ValueError, match=r"add --arch decoder-only \(Trainer keywords: text=, arch=\)"):
        qkv.Trainer(text=str(tmp_path / "t.txt"), output_dir=str(tmp_path / "run")).fit()
    with pytest.raises(ValueError, match=r"\(Trainer keyword: output_dir=\)"):
        qkv.Trainer(arch="decoder-only", text=str(tmp_path / "t.txt")).fit()


def test_renamed_keywords_warn(tmp_path):
    for old, new in RENAMED.items():
        value = str(tmp_path / "x") if new == "output_dir" else 4
        with pytest.warns(DeprecationWarning, match=rf"Trainer\({old}=\) is deprecated; use {new}="):
            trainer = qkv.Trainer(synthetic=True, **{old: value})
        assert getattr(trainer.args, new) == value


def test_arguments_and_keywords_train_the_same_weights(tmp_path):
    args = qkv.TrainingArguments(synthetic=True, preset="tiny", steps=3, threads=1, output_dir=str(tmp_path / "a"))
    qkv.Trainer(args).fit()
    qkv.Trainer(synthetic=True, preset="tiny", steps=3, threads=1, output_dir=str(tmp_path / "b")).fit()
    qkv.Trainer(args, output_dir=str(tmp_path / "c")).fit()  # keywords override the arguments' fields
    a, b, c = ((tmp_path / d / "model.safetensors").read_bytes() for d in "abc")
    assert a == b == c
