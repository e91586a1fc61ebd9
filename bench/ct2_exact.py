#!/usr/bin/env python3
"""Shows that bench/ct2_convert.py is exact: greedy translations (beam 1) of qkv and of CTranslate2
on the converted weights, compared token id for token id (issue 11, item 3).

    bench/ct2_exact.py --checkpoint runs/bible-mt/best --input /tmp/bible/test.es

Both get the same source ids (`qkv tokenize` of the checkpoint's source SentencePiece model) in the
same batches; CTranslate2's outputs are cut to qkv's per-sentence length limit (exact for greedy
search: the first tokens do not depend on the limit). Prints the number of identical lines.
CTranslate2 runs under build/bench-venv/bin/python (bench/setup_peers.sh) when it exists.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import translate_peers as tp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="source text, one sentence a line")
    ap.add_argument("--ct2-model", help="converted model directory (default: WORK/ct2-float32)")
    ap.add_argument("--qkv", default=os.path.join(tp.ROOT, "build", "qkv"))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", help="directory for the files (default: a temporary one)")
    a = ap.parse_args()

    work = a.work or tempfile.mkdtemp(prefix="ct2_exact.")
    os.makedirs(work, exist_ok=True)
    python = tp.peer_python()
    model = tp.convert_once(python, a.checkpoint, a.ct2_model or os.path.join(work, "ct2-float32"))
    src = os.path.join(work, "source.ids")
    tp.qkv_tokenize(a.qkv, a.checkpoint, a.input, src)
    qkv_out, ct2_out = os.path.join(work, "qkv.greedy.ids"), os.path.join(work, "ct2.greedy.ids")
    tp.run_child(tp.qkv_translate_cmd(a.qkv, a.checkpoint, src, 1, a.batch_size, a.threads, 1.0), qkv_out)
    tp.run_child(tp.ct2_translate_cmd(python, a.checkpoint, model, src, ct2_out, 1, a.batch_size,
                                      a.threads, "float32", 1.0, cut_to_limit=True))
    same, total = tp.identical_lines(qkv_out, ct2_out)
    print(f"greedy (beam 1): {same} of {total} lines identical, token id for token id "
          f"({qkv_out} vs {ct2_out})")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
