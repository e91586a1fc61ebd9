#!/usr/bin/env python3
"""Beam search of qkv against CTranslate2 on the same imported models (issue 35: "beam-4 output
identical to CTranslate2's on the same converted model"): the trained test models of
tests/python/make_marian_refs.py and make_t5_refs.py, converted by CTranslate2's own
TransformersConverter, and imported by `qkv import --from hf`.

    CT2_VENV/bin/python bench/compare_beam_ct2.py --refs build/ref [--qkv build/qkv] [--beam 4]

CT2_VENV: CTranslate2 4.5.0's converter reads these directories with the transformers 4.47 that
made them (newer converters pass transformers 4.56's `dtype`), so a venv over the system Python:
    /usr/bin/python3 -m venv --system-site-packages build/ct2-venv
    build/ct2-venv/bin/pip install --no-deps ctranslate2==4.5.0
For each model and length penalty (1 and 0) it prints how many of the sources get the same best
hypothesis (ids, EOS excluded) from both, and for each that differs both hypotheses, CTranslate2's
score and qkv's log-probability of each (`qkv score --per-line`, which equals transformers'
teacher-forced log-probability within 1e-4): a model that scores CTranslate2's hypothesis as
CTranslate2 does but finds a worse one is a search difference; different scores are a model or
normalisation difference.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import ctranslate2
except ImportError as e:  # pragma: no cover
    sys.exit(f"compare_beam_ct2.py: {e}: run it with a venv that has ctranslate2 (see the docstring)")

MODELS = [("hf_marian", "hf_marian_refs.json"), ("hf_t5", "hf_t5_refs.json"), ("hf_t5_v11", "hf_t5_refs.json")]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw).stdout


def lines(rows):
    return "\n".join(" ".join(map(str, r)) for r in rows) + "\n"


def qkv_beam(qkv, ckpt, sources, beam, penalty, limit):
    out = run([qkv, "translate", "--checkpoint", ckpt, "--ids", "--beam-size", str(beam), "--length-penalty", str(penalty),
               "--max-length-ratio", "0", "--max-length-offset", str(limit), "--quiet"], input=lines(sources))
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def qkv_log_probs(qkv, ckpt, tmp, sources, hyps, start, eos):
    src, tgt = os.path.join(tmp, "src.txt"), os.path.join(tmp, "tgt.txt")
    with open(src, "w") as f:
        f.write(lines(sources))
    with open(tgt, "w") as f:
        f.write(lines([[start] + h + [eos] for h in hyps]))
    out = run([qkv, "score", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--per-line"])
    return [float(x) for x in out.split()[:len(hyps)]]


def compare(args, name, refs_file, tmp):
    with open(os.path.join(args.refs, refs_file)) as f:
        sources = json.load(f)["source_ids"]
    hf = os.path.join(args.refs, name)
    ct2_dir, ckpt = os.path.join(tmp, name + "_ct2"), os.path.join(tmp, name + "_qkv")
    ctranslate2.converters.TransformersConverter(hf).convert(ct2_dir, force=True)
    run([args.qkv, "import", "--from", "hf", hf, "--output-dir", ckpt])
    with open(os.path.join(ct2_dir, "shared_vocabulary.json")) as f:
        vocab = json.load(f)
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    index = {t: i for i, t in enumerate(vocab)}
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32")
    for penalty in (1.0, 0.0):
        results = translator.translate_batch([[vocab[i] for i in s] for s in sources], beam_size=args.beam,
                                             length_penalty=penalty, max_decoding_length=args.limit,
                                             return_scores=True)
        ct2 = [[index[t] for t in r.hypotheses[0]] for r in results]
        ours = qkv_beam(args.qkv, ckpt, sources, args.beam, penalty, args.limit)
        same = sum(a == b for a, b in zip(ours, ct2))
        print(f"{name}, length penalty {penalty:g}: {same}/{len(sources)} identical")
        differ = [i for i in range(len(sources)) if ours[i] != ct2[i]]
        if not differ:
            continue
        mine = qkv_log_probs(args.qkv, ckpt, tmp, [sources[i] for i in differ], [ours[i] for i in differ],
                             config["bos_id"], config["eos_id"])
        theirs = qkv_log_probs(args.qkv, ckpt, tmp, [sources[i] for i in differ], [ct2[i] for i in differ],
                               config["bos_id"], config["eos_id"])
        for k, i in enumerate(differ):
            print(f"  source {i}: qkv {len(ours[i])} tokens, log-prob {mine[k]:.4f}; CTranslate2 {len(ct2[i])} tokens, "
                  f"log-prob by qkv {theirs[k]:.4f}, its own score {results[i].scores[0]:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--refs", required=True, help="the directory make_marian_refs.py and make_t5_refs.py wrote")
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--limit", type=int, default=60)
    args = ap.parse_args()
    print(f"CTranslate2 {ctranslate2.__version__}, beam {args.beam}, at most {args.limit} tokens")
    with tempfile.TemporaryDirectory() as tmp:
        for name, refs_file in MODELS:
            compare(args, name, refs_file, tmp)


if __name__ == "__main__":
    main()
