#!/usr/bin/env python3
"""Translates token ids with a CTranslate2 model converted by bench/ct2_convert.py, batched and
limited exactly as `qkv translate` does, and reports the translation time (issue 11, item 3).

    build/bench-venv/bin/python bench/ct2_translate.py --checkpoint CKPT --model CT2DIR --ids SRC.ids \
        --out HYP.ids [--beam 4] [--batch-size 32] [--threads 2] [--compute-type float32|int8]

SRC.ids: one line of space-separated source ids a sentence (`qkv tokenize --no-special-tokens` of
CKPT/source.spm.model: the ids `qkv translate` feeds its encoder, no BOS or EOS added). HYP.ids: the
target ids per line, without EOS, as `qkv translate --ids` writes them. One JSON line on stdout:
{"seconds": translation time (model load excluded), "tokens": target ids written, ...}.

What mirrors qkv (src/qkv/api/translator.cpp, src/qkv/decoding/search.cpp):
  * batches: the non-empty sources stably sorted by length (shortest first) and cut into batches of
    --batch-size; each batch is one translate_batch call, so CTranslate2 decodes the same groups
    (its own sorting of one call's input would group from the longest end);
  * output limit per sentence: min(ceil(ratio * source length) + offset, max_seq_length - 1) tokens;
    CTranslate2 takes one max_decoding_length per call: the batch's largest limit (sentences that go
    past their own limit are counted in "over_limit"; --cut-to-limit cuts them back, which is exact
    for greedy search);
  * score: log_prob / (tokens + 1)^length_penalty, fairseq's and qkv's; CTranslate2's translation
    search scores hypotheses with their EOS (include_eos_in_hypotheses, always on there) and drops
    it from the result, so its length_penalty is the same normalisation;
  * pad and BOS are never produced (suppress_sequences). qkv sets their log-probabilities to -inf
    after its log-softmax; CTranslate2 masks them before, so its other log-probabilities are
    renormalised over the rest: scores differ by log(1 - p(pad) - p(BOS)) a step, ~0 once trained;
  * no repetition penalty, no n-gram blocking, sources truncated to max_seq_length.
"""
import argparse
import json
import math
import os
import sys
import time


def read_ids(path):
    with open(path, encoding="utf-8") as f:
        return [[int(t) for t in line.split()] for line in f]


def output_limit(src_len, ratio, offset, max_seq_length):
    return max(1, min(math.ceil(ratio * src_len) + offset, max_seq_length - 1))


def qkv_batches(sources, batch_size):
    """Indices of the non-empty sources, grouped as qkv's Translator groups them."""
    order = sorted((i for i, s in enumerate(sources) if s), key=lambda i: len(sources[i]))  # stable
    return [order[b:b + batch_size] for b in range(0, len(order), batch_size)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the qkv checkpoint (config.json, spm models)")
    ap.add_argument("--model", required=True, help="its CTranslate2 conversion")
    ap.add_argument("--ids", required=True, help="source ids, one sentence a line")
    ap.add_argument("--out", required=True, help="target ids written here, one sentence a line")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--max-length-ratio", type=float, default=2.0)
    ap.add_argument("--max-length-offset", type=int, default=10)
    ap.add_argument("--cut-to-limit", action="store_true", help="cut outputs to each sentence's own limit")
    a = ap.parse_args()

    import ctranslate2
    import sentencepiece as spm

    with open(os.path.join(a.checkpoint, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    max_seq_length = config.get("max_seq_length", 100)
    src_sp = spm.SentencePieceProcessor(model_file=os.path.join(a.checkpoint, "source.spm.model"))
    tgt_sp = spm.SentencePieceProcessor(model_file=os.path.join(a.checkpoint, "target.spm.model"))
    sources = [s[:max_seq_length] for s in read_ids(a.ids)]
    pieces = [[src_sp.id_to_piece(i) for i in s] for s in sources]
    never = [[tgt_sp.id_to_piece(config.get(k, d))] for k, d in (("pad_id", 0), ("bos_id", 2)) if config.get(k, d) >= 0]

    device, _, index = a.device.partition(":")
    translator = ctranslate2.Translator(a.model, device=device, device_index=int(index or 0), compute_type=a.compute_type,
                                        inter_threads=1, intra_threads=a.threads)
    limits = [output_limit(len(s), a.max_length_ratio, a.max_length_offset, max_seq_length) for s in sources]
    results = [[] for _ in sources]
    start = time.perf_counter()
    for batch in qkv_batches(sources, a.batch_size):
        out = translator.translate_batch(
            [pieces[i] for i in batch], beam_size=a.beam, num_hypotheses=1, length_penalty=a.length_penalty,
            max_decoding_length=max(limits[i] for i in batch), max_batch_size=a.batch_size,
            batch_type="examples", repetition_penalty=1.0, no_repeat_ngram_size=0,
            suppress_sequences=never)
        for i, r in zip(batch, out):
            results[i] = r.hypotheses[0]  # without EOS
    seconds = time.perf_counter() - start

    over = sum(len(r) > lim for r, lim in zip(results, limits))
    if a.cut_to_limit:
        results = [r[:lim] for r, lim in zip(results, limits)]
    with open(a.out, "w", encoding="utf-8") as f:
        for r in results:
            f.write(" ".join(str(tgt_sp.piece_to_id(p)) for p in r) + "\n")
    print(json.dumps({"seconds": seconds, "tokens": sum(map(len, results)), "sentences": len(sources),
                      "over_limit": over, "compute_type": a.compute_type, "beam": a.beam}))


if __name__ == "__main__":
    sys.exit(main())
