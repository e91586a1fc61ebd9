"""Keywords renamed to docs/cli.md's scheme: every old keyword still works, gives what the new one
gives, and warns with a DeprecationWarning naming the new keyword; giving both is a TypeError."""
from __future__ import annotations

import pytest

import qkv
from qkv import _renamed

SOURCES = ["la luz era buena", "y Dios dijo"]


def deprecated(old: str, new: str):
    return pytest.warns(DeprecationWarning, match=rf"\({old}=\) is deprecated; use {new}=")


def test_every_renamed_method_is_wrapped():
    import qkv._core as core
    for (class_name, name), renamed in _renamed.RENAMED.items():
        owner = core if class_name is None else getattr(core, class_name)
        assert getattr(owner, name).__wrapped__ is not None, (class_name, name)
        assert renamed, (class_name, name)


def test_translator_beam_and_n_best(translation_checkpoint):
    t = qkv.Translator(translation_checkpoint)
    want = t.translate(SOURCES, beam_size=3)
    with deprecated("beam", "beam_size"):
        assert t.translate(SOURCES, beam=3) == want
    ids = [[5, 6, 7, 3]]
    with deprecated("beam", "beam_size"):
        assert t.translate_ids(ids, beam=2) == t.translate_ids(ids, beam_size=2)
    with pytest.warns(DeprecationWarning) as caught:
        old = t.translate(SOURCES, beam=3, n_best=2)
    assert any("Translator.translate(n_best=) is deprecated; use num_hypotheses=" in str(w.message) for w in caught)
    with pytest.warns(DeprecationWarning):
        new = t.translate(SOURCES, beam_size=3, num_hypotheses=2)
    assert [[h.text for h in hyps] for hyps in old] == [[h.text for h in hyps] for hyps in new]
    with pytest.raises(TypeError, match="give num_hypotheses= only"):
        t.translate_ids(ids, n_best=1, num_hypotheses=1)
    with pytest.raises(TypeError, match="give beam_size= only"):
        t.translate(SOURCES, beam=2, beam_size=2)


def test_generator_sample(lm_checkpoint):
    g = qkv.Generator(lm_checkpoint)
    want = g.generate("the light", max_new_tokens=6, do_sample=True, seed=3)
    with deprecated("sample", "do_sample"):
        assert g.generate("the light", max_new_tokens=6, sample=True, seed=3) == want
    ids = [[3, 5, 6]]
    with deprecated("sample", "do_sample"):
        assert g.generate_ids(ids, max_new_tokens=4, sample=True, seed=1) == g.generate_ids(
            ids, max_new_tokens=4, do_sample=True, seed=1)
    with deprecated("sample", "do_sample"):
        r = g.generate_with_attention("the light", max_new_tokens=4, sample=False)
    assert r["text"] == g.generate("the light", max_new_tokens=4)


def test_encoder_max_tokens(encoder_checkpoint):
    with deprecated("max_tokens", "max_input_length"):
        old = qkv.Encoder(encoder_checkpoint, max_tokens=8)
    new = qkv.Encoder(encoder_checkpoint, max_input_length=8)
    assert new.max_input_length == new.max_tokens
    assert (old.embed(SOURCES) == new.embed(SOURCES)).all()


def test_import_hf_out_dir(tmp_path):
    with deprecated("out_dir", "output_dir"), pytest.raises(ValueError, match="missing: not a directory"):
        qkv.import_hf(str(tmp_path / "missing"), out_dir=str(tmp_path / "ckpt"))


@pytest.mark.parametrize("old,new,value", [("out", "output_dir", "runs/x"), ("batch", "batch_size", 4),
                                           ("max_len", "max_seq_length", 32), ("max_tokens", "max_batch_tokens", 500),
                                           ("valid_beam", "valid_beam_size", 2)])
def test_trainer_keywords(old, new, value, tmp_path):
    with deprecated(old, new):
        trainer = qkv.Trainer(synthetic=True, **{old: value})
    if new == "output_dir":
        assert trainer.last_checkpoint == qkv.Trainer(synthetic=True, output_dir=value).last_checkpoint
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}x'"):
        qkv.Trainer(**{old + "x": value})
