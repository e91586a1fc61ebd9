#!/usr/bin/env python3
"""The peers of bench_embed (which runs this script itself, once per peer, each in a fresh process so
that each peak RSS is its own): sentence embeddings of all-MiniLM-L6-v2 by sentence-transformers on
PyTorch 2.x, and by CTranslate2's encoder on the same weights.

Usage (build/bench-venv/bin/python, bench/setup_peers.sh):
  embed_peers.py sentences --out FILE [--count 2000]
      FILE: COUNT KJV verses, one a line, evenly spaced over the books tests/python/make_bpe_refs.py
      reads with diatheke (Genesis..Deuteronomy, Psalms, Matthew..John). Fails when diatheke or its
      KJV module is missing.
  embed_peers.py st  --model-dir HF_DIR --sentences FILE --threads T --reps R [--batch-size 32] [--compare QKV.npy]
      SentenceTransformer(HF_DIR, device="cpu").encode(sentences, batch_size=B) (its tokenisation,
      length sorting, mean pooling and normalisation included), under torch.set_num_threads(T).
  embed_peers.py ct2 --model-dir HF_DIR --ct2-dir DIR --sentences FILE --threads T --reps R [--batch-size 32] [--compare QKV.npy]
      The HF directory converted once (ctranslate2.converters.TransformersConverter, float32) into DIR
      (cached: reused when DIR/model.bin exists; conversion time reported, not timed), then per run:
      sentences sorted by length as sentence-transformers sorts them (characters, longest first), in
      batches of B: the HF fast tokenizer (padding, truncation at 256 as the model's
      sentence_bert_config.json says), ctranslate2.Encoder(DIR, "cpu", intra_threads=T, inter_threads=1)
      .forward_batch(ids, lengths), mean pooling over the attention mask and L2 normalisation in numpy;
      rows back in input order.
Each timed mode does one warm-up run, then R timed runs of all sentences (with --serve: one run per
"step" line on stdin, alternating with qkv's runs: bench/step_protocol.py), and prints one JSON line:
  {"system", "seconds", "median_seconds", "sentences_per_second", "peak_rss_bytes" (VmHWM of this
   process after the runs: bench/peak_rss.py), "load_seconds", "versions", "min_cosine" and "max_abs_diff" against --compare
   (qkv's embeddings, float32 .npy, row i = sentence i)}
"""

import argparse
import json
import os
import statistics
import sys
import time

from peak_rss import peak_rss_bytes  # bench/, beside this script
from step_protocol import timed_steps  # bench/

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: nothing is downloaded
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def write_sentences(out, count):
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
    from make_bpe_refs import kjv_lines  # diatheke's KJV, as the tests read it

    lines = kjv_lines()
    if lines is None:
        sys.exit("embed_peers.py sentences: diatheke and its KJV module are needed (Debian: diatheke sword-text-kjv); "
                 "or give bench_embed --sentences FILE")
    step = max(1, len(lines) // count)
    picked = lines[::step][:count]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in picked))
    os.replace(tmp, out)
    print(json.dumps({"sentences": len(picked), "verses": len(lines)}))


def timed_runs(run, reps, serve):
    times, outputs = timed_steps(run, reps, serve)
    return times, outputs[-1]


def agreement(emb, compare):
    import numpy as np

    if not compare:
        return {}
    ref = np.load(compare).astype(np.float64)
    e = np.asarray(emb, dtype=np.float64)
    assert ref.shape == e.shape, (ref.shape, e.shape)
    cos = (ref * e).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(e, axis=1))
    return {"min_cosine": float(cos.min()), "max_abs_diff": float(np.abs(ref - e).max())}


def run_st(a, sentences):
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    model = SentenceTransformer(a.model_dir, device="cpu")
    load = time.perf_counter() - t0

    def run():
        with torch.inference_mode():
            return model.encode(sentences, batch_size=a.batch_size, show_progress_bar=False, convert_to_numpy=True)

    times, emb = timed_runs(run, a.reps, a.serve)
    return times, emb, load, {"torch": torch.__version__, "transformers": transformers.__version__,
                              "sentence_transformers": sentence_transformers.__version__}


def run_ct2(a, sentences):
    import ctranslate2
    import numpy as np
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    convert_seconds = None
    if not os.path.exists(os.path.join(a.ct2_dir, "model.bin")):
        t0 = time.perf_counter()
        tmp = a.ct2_dir + f".tmp-{os.getpid()}"
        ctranslate2.converters.TransformersConverter(a.model_dir).convert(tmp, quantization="float32", force=True)
        os.replace(tmp, a.ct2_dir)
        convert_seconds = time.perf_counter() - t0
    with open(os.path.join(a.model_dir, "sentence_bert_config.json")) as f:
        max_len = json.load(f).get("max_seq_length", 512)
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(a.model_dir)
    encoder = ctranslate2.Encoder(a.ct2_dir, device="cpu", compute_type=a.compute_type, intra_threads=a.threads,
                                  inter_threads=1)
    load = time.perf_counter() - t0
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # as SentenceTransformer.encode

    def run():
        rows = [None] * len(sentences)
        for b in range(0, len(order), a.batch_size):
            idx = order[b:b + a.batch_size]
            enc = tokenizer([sentences[i] for i in idx], padding=True, truncation=True, max_length=max_len,
                            return_tensors="np")
            ids = enc["input_ids"].astype(np.int32)
            mask = enc["attention_mask"].astype(np.float32)
            lengths = mask.sum(1).astype(np.int32)
            res = encoder.forward_batch(ctranslate2.StorageView.from_array(ids),
                                        ctranslate2.StorageView.from_array(lengths))
            hidden = np.asarray(res.last_hidden_state)  # (B, T, D) float32
            pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for k, i in enumerate(idx):
                rows[i] = pooled[k]
        return np.stack(rows)

    times, emb = timed_runs(run, a.reps, a.serve)
    versions = {"ctranslate2": ctranslate2.__version__, "transformers": transformers.__version__,
                "compute_type": a.compute_type}
    if convert_seconds is not None:
        versions["converted_now_seconds"] = convert_seconds
    return times, emb, load, versions


def main():
    p = argparse.ArgumentParser(description="sentence-embedding peers of bench_embed")
    p.add_argument("mode", choices=["sentences", "st", "ct2"])
    p.add_argument("--out")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--model-dir")
    p.add_argument("--ct2-dir")
    p.add_argument("--sentences")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--compute-type", default="float32", help="CTranslate2's compute type (ct2 mode)")
    p.add_argument("--compare")
    p.add_argument("--serve", action="store_true",
                   help="time one run per 'step' line on stdin, interleaved with qkv's (bench/step_protocol.py)")
    a = p.parse_args()
    if a.mode == "sentences":
        if not a.out:
            p.error("sentences needs --out")
        write_sentences(a.out, a.count)
        return 0
    if not a.model_dir or not a.sentences or (a.mode == "ct2" and not a.ct2_dir):
        p.error("st needs --model-dir and --sentences; ct2 also --ct2-dir")
    sentences = read_sentences(a.sentences)
    times, emb, load, versions = (run_st if a.mode == "st" else run_ct2)(a, sentences)
    peak = peak_rss_bytes()
    med = statistics.median(times)
    print(json.dumps({
        "system": a.mode, "seconds": times, "median_seconds": med, "sentences_per_second": len(sentences) / med,
        "peak_rss_bytes": peak, "load_seconds": load, "versions": versions, "threads": a.threads,
        "sentences": len(sentences), **agreement(emb, a.compare),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
