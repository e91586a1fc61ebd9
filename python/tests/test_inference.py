"""Translator, Generator and Encoder give what the CLI gives on the same checkpoint."""
from __future__ import annotations

import numpy as np
import pytest

import qkv
from conftest import run_qkv, sentences, write_lines


def test_translator_equals_qkv_translate(translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:12]] + [""]
    inp = write_lines(tmp_path / "in.es", src)
    translator = qkv.Translator(translation_checkpoint)
    for beam in (1, 4):
        cli = run_qkv("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", str(beam),
                      "--threads", "1", "--quiet")
        ours = translator.translate(src, beam_size=beam, batch_size=5)
        assert ours == cli.stdout.split("\n")[:len(src)]
    assert ours[-1] == ""  # an empty source stays empty


def test_languages_are_for_multilingual_models(translation_checkpoint):
    # source_lang / target_lang choose an M2M100, NLLB or mBART model's languages (checked against
    # transformers in tests/model/hf_m2m100_test.cpp); a model whose tokenizer has no language
    # codes refuses them by name.
    translator = qkv.Translator(translation_checkpoint)
    for kwargs in ({"target_lang": "fr"}, {"source_lang": "en"}):
        with pytest.raises(ValueError, match="language"):
            translator.translate(["hola"], beam_size=1, **kwargs)
        with pytest.raises(ValueError, match="language codes"):
            translator.translate_batch(["hola"], beam_size=1, **kwargs)


def test_int8_translation_equals_the_cli_and_bad_precision_is_refused(translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:8]]
    inp = write_lines(tmp_path / "in.es", src)
    translator = qkv.Translator(translation_checkpoint, compute_type="int8")
    assert translator.compute_type == "int8"
    cli = run_qkv("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", "4",
                  "--threads", "1", "--quiet", "--compute-type", "int8")
    want = cli.stdout.split("\n")[:len(src)]
    assert translator.translate(src, beam_size=4) == want
    # The older spellings give the same: --quantize int8, and quantize= per call (deprecated: it
    # switches a float32 translator to int8, with a warning).
    old_cli = run_qkv("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", "4",
                      "--threads", "1", "--quiet", "--quantize", "int8")
    assert old_cli.stdout.split("\n")[:len(src)] == want
    float32 = qkv.Translator(translation_checkpoint)
    assert float32.compute_type == "float32"
    with pytest.warns(DeprecationWarning, match="compute_type"):
        assert float32.translate(src, beam_size=4, quantize="int8") == want
    assert float32.compute_type == "int8"
    with pytest.raises(ValueError, match="quantize"):
        translator.translate(src, quantize="int4")
    with pytest.raises(ValueError, match="compute_type"):
        qkv.Translator(translation_checkpoint, compute_type="int4")


def test_bf16_compute_types_follow_float32(translation_checkpoint, data_dir):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:6]]
    float32 = [r[0] for r in qkv.Translator(translation_checkpoint).translate_batch(src, beam_size=2)]
    for compute_type in ("bf16", "int8_bf16"):
        t = qkv.Translator(translation_checkpoint, compute_type=compute_type)
        assert t.compute_type == compute_type
        ours = [r[0] for r in t.translate_batch(src, beam_size=2)]
        same = [(a, b) for a, b in zip(ours, float32) if a.tokens == b.tokens]
        # Weights and inputs with 8-bit mantissas: most greedy outputs stay, and where they do the
        # log-probability moves by a few percent at most.
        assert len(same) >= len(src) // 2, compute_type
        for a, b in same:
            assert a.log_prob == pytest.approx(b.log_prob, rel=0.05, abs=0.05), compute_type


def test_n_best_hypotheses_are_ranked_and_match_the_cli(translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:3]]
    inp = write_lines(tmp_path / "in.es", src)
    translator = qkv.Translator(translation_checkpoint)
    results = translator.translate_batch(src, beam_size=4, num_hypotheses=3)
    assert len(results) == 3 and all(len(r) == 3 for r in results)
    assert all(isinstance(r, qkv.TranslationResult) for r in results)
    cli = run_qkv("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", "4",
                  "--num-hypotheses", "3", "--threads", "1", "--quiet").stdout.splitlines()
    for i, hyps in enumerate(results):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for j, h in enumerate(hyps):
            index, text, log_prob, score = cli[3 * i + j].split(" ||| ")
            assert (int(index), text) == (i, h.text)
            assert float(log_prob) == pytest.approx(h.log_prob, abs=2e-6)
    ids = translator.translate_ids([results[0][0].tokens], beam_size=1)
    assert all(isinstance(t, int) for t in ids[0])
    # The old form stays one release, with a deprecation note pointing to translate_batch.
    with pytest.warns(DeprecationWarning, match="translate_batch"):
        old = translator.translate(src, beam_size=4, num_hypotheses=3)
    assert [[h.text for h in hyps] for hyps in old] == [r.hypotheses for r in results]


def test_typed_results_whatever_the_options(translation_checkpoint, lm_checkpoint, encoder_checkpoint, data_dir):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:4]]
    translator = qkv.Translator(translation_checkpoint)
    # One hypothesis or several, greedy or beam: a TranslationResult per source, scores included.
    for beam, k in ((1, 1), (4, 1), (4, 2)):
        results = translator.translate_batch(src, beam_size=beam, num_hypotheses=k)
        assert [type(r) for r in results] == [qkv.TranslationResult] * len(src)
        assert all(len(r) == k == len(r.hypotheses) == len(r.scores) == len(r.log_probs) for r in results)
        assert all(r.attention is None for r in results)
        assert [r.hypotheses[0] for r in results] == translator.translate(src, beam_size=beam)
        assert all(list(r.scores) == sorted(r.scores, reverse=True) for r in results)
    best = translator.translate_batch(src[:1], return_attention=True)[0]
    assert best.attention[0]["cross_attention"][-1].shape[0] == 2
    assert best[0].text == best.hypotheses[0] and best[-1].tokens == best.tokens[-1]
    with pytest.raises(IndexError):
        best[5]
    assert "TranslationResult(hypotheses=[" in repr(best)
    by_ids = translator.translate_ids_batch([best.tokens[0]], beam_size=1)
    assert isinstance(by_ids[0], qkv.TranslationResult) and all(isinstance(t, int) for t in by_ids[0].tokens[0])
    # Generation: text, tokens and why it ended; HF's do_sample; a token stream of the same text.
    generator = qkv.Generator(lm_checkpoint)
    prompts = ["the light", "God said let there"]
    results = generator.generate_batch(prompts, max_new_tokens=12, do_sample=True, seed=5)
    assert [r.text for r in results] == generator.generate(prompts, max_new_tokens=12, do_sample=True, seed=5)
    for r in results:
        assert isinstance(r, qkv.GenerationResult) and r.finish_reason in ("stop", "length")
        assert (r.finish_reason == "length") == (len(r.tokens) == 12)
    streamed = "".join(generator.generate_tokens("the light", max_new_tokens=12, do_sample=True, seed=5))
    assert streamed == results[0].text
    # Embedding one text gives one vector, as sentence-transformers' encode(str).
    encoder = qkv.Encoder(encoder_checkpoint)
    one = encoder.embed("the light was good")
    assert one.shape == (encoder.dim,)
    np.testing.assert_array_equal(one, encoder.embed(["the light was good"])[0])


def test_generator_equals_qkv_generate_and_streams_the_same_text(lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    generator = qkv.Generator(lm_checkpoint)
    for extra in ([], ["--do-sample", "--seed", "5", "--top-k", "10"]):
        cli = run_qkv("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12",
                      "--threads", "1", "--quiet", *extra)
        sample = bool(extra)
        ours = generator.generate(prompts, max_new_tokens=12, do_sample=sample, seed=5, top_k=10 if sample else 0)
        assert ours == cli.stdout.split("\n")[:3]
    # One prompt as a str is line 0 of a list; streamed, its pieces add up to the same text (sampled:
    # the small model's greedy continuation is empty).
    one = generator.generate("the light", max_new_tokens=12, do_sample=True, seed=3)
    assert one == generator.generate(["the light", "x"], max_new_tokens=12, do_sample=True, seed=3)[0]
    pieces = list(generator.generate("the light", max_new_tokens=12, do_sample=True, seed=3, stream=True))
    assert len(pieces) >= 2 and "".join(pieces) == one


def test_int8_generation_equals_the_cli_and_bad_precision_is_refused(lm_checkpoint, tmp_path):
    prompts = ["the light", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    generator = qkv.Generator(lm_checkpoint, compute_type="int8")
    cli = run_qkv("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12",
                  "--do-sample", "--seed", "5", "--threads", "1", "--quiet", "--compute-type", "int8")
    ours = generator.generate(prompts, max_new_tokens=12, do_sample=True, seed=5)
    assert ours == cli.stdout.split("\n")[:2]
    assert generator.generate(prompts, max_new_tokens=12, do_sample=True, seed=5, quantize="int8") == ours
    with pytest.raises(ValueError, match="quantize"):
        generator.generate("the", quantize="fp4")


def test_a_stream_dropped_early_stops_cleanly(lm_checkpoint):
    generator = qkv.Generator(lm_checkpoint)
    # Sampled: the small model's greedy continuations are empty, and a stream that has ended tests
    # nothing about dropping one early.
    full = generator.generate("the light", max_new_tokens=30, do_sample=True, seed=3)
    stream = generator.generate("the light", max_new_tokens=30, do_sample=True, seed=3, stream=True)
    first = next(iter(stream))
    # Dropped with more to come: the first piece is a proper prefix of the whole continuation.
    assert first and full.startswith(first) and len(first) < len(full)
    del stream  # the worker stops at its next token and is joined; nothing hangs or crashes
    # The generator is unharmed: the same request gives the same continuation, streamed or not.
    assert generator.generate("the light", max_new_tokens=30, do_sample=True, seed=3) == full
    assert "".join(generator.generate("the light", max_new_tokens=30, do_sample=True, seed=3, stream=True)) == full


def test_generate_errors_are_value_errors(lm_checkpoint):
    generator = qkv.Generator(lm_checkpoint)
    with pytest.raises(ValueError, match="temperature"):
        generator.generate("the", do_sample=True, temperature=-1.0)
    with pytest.raises(ValueError, match="one prompt"):
        generator.generate(["a", "b"], stream=True)


def test_encoder_embeddings_equal_qkv_embed(encoder_checkpoint, tmp_path):
    texts = sentences(7, 9) + [""]
    inp = write_lines(tmp_path / "sentences.txt", texts)
    run_qkv("embed", "--checkpoint", encoder_checkpoint, "--input", str(inp), "-o", str(tmp_path / "e.npy"),
            "--threads", "1")
    encoder = qkv.Encoder(encoder_checkpoint)
    ours = encoder.embed(texts, batch_size=3)
    assert ours.dtype == np.float32 and ours.shape == (8, encoder.dim)
    np.testing.assert_allclose(ours, np.load(tmp_path / "e.npy"), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="no classification head"):
        encoder.classify(texts)


def test_translation_attention_is_returned_labelled_and_drawn(translation_checkpoint, data_dir, tmp_path):
    src = (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[0]
    translator = qkv.Translator(translation_checkpoint)
    best = translator.translate_batch([src], beam_size=4, return_attention=True)[0][0]
    assert best.text == translator.translate([src], beam_size=4)[0]  # asking for weights changes nothing
    layers = translator.model.config["num_layers"]
    source, target = translator.source_pieces(src), translator.target_pieces(best.tokens)
    # The keys are the names of --attention-out's .npz arrays; the old ones index it for a release.
    attention = best.attention  # each read of the property converts the weights afresh
    assert sorted(attention) == ["cross_attention", "decoder_self_attention", "encoder_self_attention"]
    cross = attention["cross_attention"]
    for old, new in (("cross", "cross_attention"), ("decoder_self", "decoder_self_attention"),
                     ("encoder_self", "encoder_self_attention")):
        with pytest.warns(DeprecationWarning, match=f"attention\\['{old}'\\] is deprecated; use attention\\['{new}'\\]"):
            assert attention[old] is attention[new]
    with pytest.raises(KeyError):
        attention["self_attention"]
    assert len(cross) == layers
    assert cross[-1].shape == (2, len(target), len(source))
    np.testing.assert_allclose(cross[-1].sum(axis=-1), 1.0, rtol=1e-5)
    figure = qkv.plot.attention(cross[-1], source, target, out=tmp_path / "cross.png")
    assert (tmp_path / "cross.png").stat().st_size > 1000
    assert len(figure.axes) >= 2


def test_generation_attention_covers_the_tokens_read(lm_checkpoint, tmp_path):
    generator = qkv.Generator(lm_checkpoint)
    r = generator.generate_with_attention("the light", max_new_tokens=6, do_sample=True, seed=3)
    assert r["text"] == generator.generate("the light", max_new_tokens=6, do_sample=True, seed=3)
    w = r["self_attention"][-1]
    T = len(r["pieces"])
    assert w.shape == (2, T, T)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(w[0], k=1) == 0)  # causal: no query sees a later token
    qkv.plot.attention(w, r["pieces"], r["pieces"], head="mean", out=tmp_path / "self.png")
    assert (tmp_path / "self.png").stat().st_size > 1000


def test_device_is_chosen_at_load_and_a_missing_gpu_is_a_clear_error(translation_checkpoint, lm_checkpoint,
                                                                     encoder_checkpoint):
    assert qkv.Translator(translation_checkpoint, device="cpu").device == "cpu"
    assert qkv.Generator(lm_checkpoint).device == "cpu"
    assert qkv.Encoder(encoder_checkpoint).device == "cpu"
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        qkv.Translator(translation_checkpoint, device="gpu")
    # This machine has no GPU (CI's), or this qkv no CUDA: either way the error names the device.
    for make in (lambda: qkv.Translator(translation_checkpoint, device="cuda"),
                 lambda: qkv.Generator(lm_checkpoint, device="cuda:0"),
                 lambda: qkv.Encoder(encoder_checkpoint, device="cuda")):
        try:
            model = make()
        except ValueError as e:
            assert "cuda:0" in str(e) and ("no CUDA GPU" in str(e) or "without CUDA" in str(e)), str(e)
        else:
            assert model.device == "cuda:0"  # a machine with a GPU and a CUDA build
