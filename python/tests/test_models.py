"""Checkpoints and weights through NumPy: views without copies, writing weights, saving, errors."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import qkv
from conftest import run_qkv


@pytest.fixture()
def small_checkpoint(lm_checkpoint, tmp_path) -> str:
    """A copy of the small decoder-only checkpoint that a test may change."""
    shutil.copytree(lm_checkpoint, tmp_path / "ckpt")
    return str(tmp_path / "ckpt")


def test_parameters_are_views_of_the_model_and_writes_reach_it(small_checkpoint, tmp_path):
    model = qkv.load_checkpoint(small_checkpoint)
    assert model.architecture == "decoder-only"
    assert model.config["d_model"] == 16
    params = model.parameters
    # Tied matrices (the output projection and the embedding) are one array under two names.
    distinct = {a.__array_interface__["data"][0]: a.size for a in params.values()}
    assert sum(distinct.values()) == model.num_parameters
    name = next(n for n, a in params.items() if a.ndim == 2)
    view = params[name]
    assert view.dtype == np.float32 and view.flags.writeable
    # Two reads share one buffer: no copy was made.
    assert np.shares_memory(view, model.parameters[name])
    before = model.logits(np.array([[1, 2, 3]], dtype=np.int32))
    view[...] = 0.25  # writing into the view writes into the model
    assert np.all(model.parameters[name] == 0.25)
    after = model.logits(np.array([[1, 2, 3]], dtype=np.int32))
    assert after.shape == (1, 3, model.config["vocab_size"])
    assert not np.allclose(before, after)
    # set_parameter copies an array of the right shape in, and save/load keeps it exactly.
    new = np.random.default_rng(0).standard_normal(view.shape).astype(np.float64)
    model.set_parameter(name, new)
    out = tmp_path / "saved"
    model.save(str(out))
    again = qkv.load_checkpoint(str(out))
    np.testing.assert_array_equal(again.parameters[name], new.astype(np.float32))
    for n, a in model.parameters.items():
        np.testing.assert_array_equal(again.parameters[n], a)


def test_views_outlive_the_model(small_checkpoint):
    model = qkv.load_checkpoint(small_checkpoint)
    arrays = dict(model.parameters)
    copies = {n: a.copy() for n, a in arrays.items()}
    del model
    for n, a in arrays.items():
        np.testing.assert_array_equal(a, copies[n])


def test_wrong_shapes_names_and_paths_are_python_errors(small_checkpoint, tmp_path):
    model = qkv.load_checkpoint(small_checkpoint)
    name = next(iter(model.parameters))
    with pytest.raises(ValueError, match="does not match the parameter"):
        model.set_parameter(name, np.zeros((3, 3, 3)))
    with pytest.raises(KeyError, match="no parameter named"):
        model.set_parameter("nope", np.zeros(1))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        qkv.load_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="decoder-only"):
        qkv.Translator(small_checkpoint)
    with pytest.raises(TypeError, match="unexpected keyword argument 'stepz'"):
        qkv.Trainer(stepz=3)


def test_score_equals_the_cli(small_checkpoint, tmp_path):
    model = qkv.load_checkpoint(small_checkpoint)
    lines = [[2, 5, 6, 7], [2, 9, 3]]
    r = qkv.score(model, lines)
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(" ".join(map(str, l)) + "\n" for l in lines))
    cli = run_qkv("score", "--checkpoint", small_checkpoint, "--tgt", str(ids), "--per-line", "--threads", "1")
    per_line = [float(x) for x in cli.stdout.split("\n")[:2]]
    np.testing.assert_allclose(r["line_log_prob"], per_line, rtol=1e-5)
    assert r["tokens"] == 5


def test_int8_score_equals_the_cli_and_follows_float32(small_checkpoint, tmp_path):
    model = qkv.load_checkpoint(small_checkpoint)
    lines = [[2, 5, 6, 7], [2, 9, 3]]
    exact = qkv.score(model, lines)
    r = qkv.score(model, lines, compute_type="int8")
    assert model.compute_type is None  # the call's compute type ends with it
    assert qkv.score(model, lines, quantize="int8")["line_log_prob"] == r["line_log_prob"]
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(" ".join(map(str, l)) + "\n" for l in lines))
    cli = run_qkv("score", "--checkpoint", small_checkpoint, "--tgt", str(ids), "--per-line", "--threads", "1",
                  "--quantize", "int8")
    per_line = [float(x) for x in cli.stdout.split("\n")[:2]]
    np.testing.assert_allclose(r["line_log_prob"], per_line, rtol=1e-5)
    np.testing.assert_allclose(r["line_log_prob"], exact["line_log_prob"], rtol=0.05)
    with pytest.raises(ValueError, match="quantize"):
        qkv.score(model, lines, quantize="int4")
    with pytest.raises(ValueError, match="not both"):
        qkv.score(model, lines, quantize="int8", compute_type="int8")
    with pytest.raises(ValueError, match="compute_type"):
        qkv.score(model, lines, compute_type="fp4")
