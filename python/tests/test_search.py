"""The search every family shares from Python: Generator beam search and Translator sampling give
what the CLI gives, and bad options are ValueErrors naming the flag."""
from __future__ import annotations

import pytest

import qkv
from conftest import run_qkv, write_lines


def test_generator_beam_search_and_rules_equal_qkv_generate(lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    generator = qkv.Generator(lm_checkpoint)
    cli = run_qkv("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "10",
                  "--beam-size", "4", "--length-penalty", "0.8", "--no-repeat-ngram-size", "2",
                  "--repetition-penalty", "1.2", "--min-new-tokens", "3", "--threads", "1", "--quiet")
    ours = generator.generate(prompts, max_new_tokens=10, beam_size=4, length_penalty=0.8, no_repeat_ngram_size=2,
                              repetition_penalty=1.2, min_new_tokens=3)
    assert ours == cli.stdout.split("\n")[:3]
    results = generator.generate_batch(prompts, max_new_tokens=10, beam_size=4, length_penalty=0.8,
                                       no_repeat_ngram_size=2, repetition_penalty=1.2, min_new_tokens=3)
    assert [r.text for r in results] == ours


def test_translator_sampling_equals_qkv_translate(translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:8]]
    inp = write_lines(tmp_path / "in.es", src)
    translator = qkv.Translator(translation_checkpoint)
    cli = run_qkv("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--do-sample",
                  "--seed", "7", "--top-p", "0.9", "--threads", "1", "--quiet")
    ours = translator.translate(src, do_sample=True, seed=7, top_p=0.9, batch_size=3)
    assert "".join(t + "\n" for t in ours) == cli.stdout  # a draw may hold a newline: compare the whole output
    assert translator.translate(src, do_sample=True, seed=7, top_p=0.9) == ours  # batch size does not matter
    greedy = translator.translate(src, beam_size=1)
    assert translator.translate(src, do_sample=True, seed=8, top_k=1) == greedy


def test_bad_search_options_are_value_errors_naming_the_flag(translation_checkpoint, lm_checkpoint):
    translator = qkv.Translator(translation_checkpoint)
    with pytest.raises(ValueError, match="--do-sample"):
        translator.translate(["hola"], do_sample=True, beam_size=4)
    with pytest.raises(ValueError, match="--repetition-penalty"):
        translator.translate(["hola"], repetition_penalty=0.0)
    generator = qkv.Generator(lm_checkpoint)
    with pytest.raises(ValueError, match="--do-sample"):
        generator.generate("the", beam_size=2, do_sample=True)
    with pytest.raises(ValueError, match="--no-repeat-ngram-size"):
        generator.generate("the", no_repeat_ngram_size=-1)
