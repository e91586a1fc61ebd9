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


def cli_n_best(lm_checkpoint: str, inp, *flags: str) -> list[list[tuple[str, str, str]]]:
    """`qkv generate --num-hypotheses` parsed: per prompt its (text, log-prob, score) lines in order."""
    out = run_qkv("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--threads", "1", "--quiet", *flags)
    per_prompt: dict[int, list[tuple[str, str, str]]] = {}
    for line in out.stdout.splitlines():
        index, text, log_prob, score = line.split(" ||| ")
        per_prompt.setdefault(int(index), []).append((text, log_prob, score))
    return [per_prompt[i] for i in sorted(per_prompt)]


def test_generator_n_best_equals_qkv_generate_num_hypotheses(lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    flags = dict(max_new_tokens=10, beam_size=4, length_penalty=0.8, no_repeat_ngram_size=2)
    cli = cli_n_best(lm_checkpoint, write_lines(tmp_path / "prompts.txt", prompts), "--max-new-tokens", "10",
                     "--beam-size", "4", "--num-hypotheses", "3", "--length-penalty", "0.8",
                     "--no-repeat-ngram-size", "2")
    generator = qkv.Generator(lm_checkpoint)
    ours = generator.generate(prompts, num_hypotheses=3, **flags)
    assert [[(h.text, f"{h.log_prob:.6f}", f"{h.score:.6f}") for h in hyps] for hyps in ours] == cli
    assert all(isinstance(h, qkv.Generation) and h.finish_reason in ("stop", "length") for hyps in ours for h in hyps)
    for hyps in ours:  # three different continuations, best first
        assert len({tuple(h.tokens) for h in hyps}) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert hyps[0].score > hyps[-1].score
    # The best is what the same beam gives with num_hypotheses=1.
    assert [hyps[0].text for hyps in ours] == generator.generate(prompts, **flags)
    # One prompt (a str): its list; generate_batch: the same hypotheses, the best as text.
    assert [h.tokens for h in generator.generate(prompts[2], num_hypotheses=3, **flags)] == [h.tokens for h in ours[2]]
    batch = generator.generate_batch(prompts, num_hypotheses=3, **flags)
    assert [[h.tokens for h in r.hypotheses] for r in batch] == [[h.tokens for h in hyps] for hyps in ours]
    assert [(r.text, r.finish_reason) for r in batch] == [(hyps[0].text, hyps[0].finish_reason) for hyps in ours]
    assert generator.generate_batch(prompts, max_new_tokens=10)[0].hypotheses == []  # greedy: no n-best


def test_generator_ids_n_best_equals_qkv_generate_ids(lm_checkpoint, tmp_path):
    prompts = [[5, 17, 40], [3]]
    inp = write_lines(tmp_path / "ids.txt", [" ".join(map(str, p)) for p in prompts])
    cli = cli_n_best(lm_checkpoint, inp, "--ids", "--max-new-tokens", "8", "--beam-size", "3", "--num-hypotheses", "3")
    ours = qkv.Generator(lm_checkpoint).generate_ids(prompts, max_new_tokens=8, beam_size=3, num_hypotheses=3)
    assert [[(" ".join(map(str, h.tokens)), f"{h.log_prob:.6f}", f"{h.score:.6f}") for h in hyps] for hyps in ours] == cli


def test_bad_num_hypotheses_are_value_errors_naming_it(lm_checkpoint):
    generator = qkv.Generator(lm_checkpoint)
    with pytest.raises(ValueError, match=r"num_hypotheses=3: at most beam_size \(2\)"):
        generator.generate("the", beam_size=2, num_hypotheses=3)
    with pytest.raises(ValueError, match=r"num_hypotheses=2: do_sample=True"):
        generator.generate_ids([[3]], beam_size=2, num_hypotheses=2, do_sample=True)
    with pytest.raises(ValueError, match=r"num_hypotheses=2: stream=True"):
        generator.generate("the", beam_size=2, num_hypotheses=2, stream=True)
    with pytest.raises(ValueError, match=r"num_hypotheses=0"):
        generator.generate_batch(["the"], num_hypotheses=0)
