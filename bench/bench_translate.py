#!/usr/bin/env python3
"""Translation speed of `qkv translate` (float32 and --quantize int8) against CTranslate2 (float32 and int8) on the same weights
(issue 11, item 3), with peak memory, BLEU and the agreement of the outputs, all from one run.

    bench/bench_translate.py --checkpoint runs/bible-mt/best --input /tmp/bible/test.es --ref /tmp/bible/test.en
        [--beam 4] [--batch-size 32] [--threads 2] [--runs 3] [--work DIR] [--no-ct2] [--bf16] [--device cuda]

Needs build/qkv and the peers' venv (bench/setup_peers.sh: build/bench-venv with ctranslate2);
--no-ct2 runs qkv alone (float32 and int8), without the venv (CTest's bench.translate does so on a
tiny model). --bf16 adds qkv's bf16 compute type (`--compute-type bf16`); --device cuda translates on
the GPU, qkv's and CTranslate2's alike (scripts/gpu_check.sh runs it with --no-ct2: CTranslate2's
CUDA build is not on the GPU machine).
The checkpoint is converted once with bench/ct2_convert.py (cached in WORK/ct2-float32; int8 is
CTranslate2's compute_type="int8", quantized when the model loads). Every translation runs in its
own process, so each peak RSS (os.wait4 of that child) is that peer's alone; peers alternate within
each of --runs rounds and the medians are printed.

  * All three translate the same source ids (`qkv tokenize` of CKPT/source.spm.model, what
    `qkv translate` feeds its encoder) in the same batches: qkv sorts the sentences by length
    (shortest first, stable) and cuts batches of --batch-size; the CTranslate2 driver
    (bench/ct2_translate.py) makes the same batches, one translate_batch call each, with qkv's length
    limit, length normalisation (log_prob / (tokens + 1)^alpha) and no repetition penalty.
  * Tokens: target ids written per sentence, EOS excluded, counted the same way for each peer.
  * Time: qkv's is the wall time of `qkv translate --ids` on the whole input minus the wall time of the
    same command on the first sentence alone (that removes process start and model loading, and adds
    back one sentence's decoding); qkv's own clock (its summary line, after loading) is printed too.
    CTranslate2's is measured in its process around the translate_batch calls (model load excluded).
  * BLEU: ids decoded with CKPT/target.spm.model (what `qkv translate` prints), scored by `qkv bleu`
    (sacreBLEU's defaults). Where the decoding Python lacks sentencepiece (--no-ct2 without the
    venv), qkv's hypotheses are `qkv translate` of the text itself, run once more, untimed.
  * SGEMM ceiling: OpenBLAS's GFLOP/s before and after the rounds (build/bench/bench_int8_gemm
    --sgemm-ceiling), to say how fast the machine was; skipped when that binary was not built.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import translate_peers as tp  # noqa: E402


def has_sentencepiece(python):
    return subprocess.run([python, "-c", "import sentencepiece"], capture_output=True).returncode == 0


def decode_ids(python, checkpoint, ids_path, text_path):
    script = ("import sentencepiece as s,sys;sp=s.SentencePieceProcessor(model_file=sys.argv[1])\n"
              "out=open(sys.argv[3],'w',encoding='utf-8')\n"
              "for l in open(sys.argv[2],encoding='utf-8'): out.write(sp.decode([int(t) for t in l.split()])+'\\n')")
    tp.run_child([python, "-c", script, os.path.join(checkpoint, "target.spm.model"), ids_path, text_path])


def bleu(qkv, ref, hyp):
    with open(hyp) as f:
        return subprocess.run([qkv, "bleu", ref], stdin=f, capture_output=True, text=True, check=True).stdout.strip()


def better_of_differing(qkv, checkpoint, work, src_path, a_path, b_path, alpha, threads):
    """On the lines where the two outputs differ, which hypothesis qkv's model scores higher by the
    search's own criterion, log_prob / (tokens + 1)^alpha (`qkv score` of BOS hyp EOS): a search
    difference (a better hypothesis missed) rather than a model difference."""
    with open(os.path.join(checkpoint, "config.json")) as f:
        c = json.load(f)
    bos, eos = c.get("bos_id", 2), c.get("eos_id", 3)
    src, a, b = tp.read_lines(src_path), tp.read_lines(a_path), tp.read_lines(b_path)
    rows = [i for i in range(len(a)) if a[i] != b[i]]
    if not rows:
        return 0, 0, 0
    s_path, t_path = os.path.join(work, "differing.src"), os.path.join(work, "differing.tgt")
    with open(s_path, "w") as fs, open(t_path, "w") as ft:
        for hyp in (a, b):
            for i in rows:
                fs.write(src[i] + "\n")
                ft.write(" ".join([str(bos)] + hyp[i].split() + [str(eos)]) + "\n")
    out = tp.run_child([qkv, "score", "--checkpoint", checkpoint, "--src", s_path, "--tgt", t_path, "--per-line",
                        "--threads", str(threads)]).stdout.split("\n")
    lp = [float(x) for x in out[:2 * len(rows)]]
    norm = [lp[k] / (len(((a, b)[k // len(rows)])[rows[k % len(rows)]].split()) + 1) ** alpha
            for k in range(2 * len(rows))]
    a_wins = sum(norm[k] > norm[k + len(rows)] for k in range(len(rows)))
    b_wins = sum(norm[k] < norm[k + len(rows)] for k in range(len(rows)))
    return len(rows), a_wins, b_wins


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="qkv encoder-decoder checkpoint directory")
    ap.add_argument("--input", required=True, help="source text, one sentence a line")
    ap.add_argument("--ref", required=True, help="reference translations for BLEU")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="rounds; medians are printed")
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--qkv", default=os.path.join(tp.ROOT, "build", "qkv"))
    ap.add_argument("--work", help="directory for the files (default: a temporary one)")
    ap.add_argument("--no-ct2", action="store_true", help="qkv alone (float32 and int8): no CTranslate2, no venv")
    ap.add_argument("--bf16", action="store_true", help="also qkv's bf16 compute type")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N for qkv and CTranslate2 on a GPU")
    a = ap.parse_args()
    if a.runs < 1 or a.beam < 1 or a.batch_size < 1 or a.threads < 1:
        ap.error("need --runs, --beam, --batch-size, --threads >= 1")
    for path, what in ((a.qkv, "the qkv CLI (build it first)"), (a.input, "--input"), (a.ref, "--ref")):
        if not os.path.exists(path):
            sys.exit(f"{path}: no such file ({what})")

    busy = subprocess.run(["pgrep", "-f", "qkv train"], capture_output=True, text=True).stdout.split()
    if busy:
        print(f"warning: 'qkv train' is running (pid {', '.join(busy)}): timings share the cores", file=sys.stderr)
    work = a.work or tempfile.mkdtemp(prefix="bench_translate.")
    os.makedirs(work, exist_ok=True)
    python = tp.peer_python()
    model = None if a.no_ct2 else tp.convert_once(python, a.checkpoint, os.path.join(work, "ct2-float32"))
    src, first = os.path.join(work, "source.ids"), os.path.join(work, "first.ids")
    tp.qkv_tokenize(a.qkv, a.checkpoint, a.input, src)
    with open(first, "w") as f:
        f.write(next(line for line in tp.read_lines(src) if line.strip()) + "\n")

    on_cpu = a.device == "cpu"
    ceilings = [tp.sgemm_ceiling(a.qkv, a.threads) if on_cpu else None]
    ct2_peers = [] if a.no_ct2 else ["ct2 float32", "ct2 int8"]
    qkv_types = {"qkv": "float32", "qkv int8": "int8", **({"qkv bf16": "bf16"} if a.bf16 else {})}
    peers = list(qkv_types) + ct2_peers
    out = {p: os.path.join(work, p.replace(" ", "-") + ".ids") for p in peers}
    secs, rss, own, over = {p: [] for p in peers}, {p: [] for p in peers}, [], {}
    def qkv_cmd(ids, compute_type):
        return tp.qkv_translate_cmd(a.qkv, a.checkpoint, ids, a.beam, a.batch_size, a.threads,
                                    a.length_penalty) + ["--compute-type", compute_type, "--device", a.device]

    for r in range(a.runs):
        for p, compute_type in qkv_types.items():
            full = tp.run_child(qkv_cmd(src, compute_type), out[p])
            one = tp.run_child(qkv_cmd(first, compute_type), os.path.join(work, "first.out.ids"))
            secs[p].append(full.wall - one.wall)
            rss[p].append(full.maxrss_mb)
            if p == "qkv":
                own.append(tp.qkv_summary_seconds(full.stderr))
        for p in ct2_peers:
            run = tp.run_child(tp.ct2_translate_cmd(python, a.checkpoint, model, src, out[p], a.beam, a.batch_size,
                                                    a.threads, p.split()[1], a.length_penalty) + ["--device", a.device])
            report = json.loads(run.stdout)
            secs[p].append(report["seconds"])
            over[p] = report["over_limit"]
            rss[p].append(run.maxrss_mb)
        print(f"round {r + 1}/{a.runs}: " + ", ".join(f"{p} {secs[p][-1]:.2f} s" for p in peers), file=sys.stderr)
    ceilings.append(tp.sgemm_ceiling(a.qkv, a.threads) if on_cpu else None)

    where = f"{a.threads} threads" if on_cpu else f"device {a.device}"
    print(f"checkpoint {a.checkpoint}, input {a.input} ({len(tp.read_lines(src))} lines), beam {a.beam}, "
          f"batches of {a.batch_size}, {where}, median of {a.runs} runs")
    known = [c for c in ceilings if c is not None]
    if known:
        print(f"SGEMM ceiling (OpenBLAS, {a.threads} threads, bench_int8_gemm --sgemm-ceiling) before and after the "
              f"rounds: " + " and ".join(f"{c:.0f}" for c in known) + " GFLOP/s")
    print(f"{'peer':<12} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'peak RSS':>9}  BLEU")
    tps = {}
    decode = has_sentencepiece(python)
    for p in peers:
        tokens = tp.count_tokens(out[p])
        s = statistics.median(secs[p])
        if s <= 0:
            sys.exit(f"{p}: {s:.3f} s after subtracting the one-sentence run: the input is too small to time")
        tps[p] = tokens / s
        hyp = out[p][:-4] + ".txt"
        if decode:
            decode_ids(python, a.checkpoint, out[p], hyp)
        else:  # qkv only (--no-ct2): its own text output of the same translation, untimed
            cmd = tp.qkv_translate_cmd(a.qkv, a.checkpoint, a.input, a.beam, a.batch_size, a.threads, a.length_penalty)
            tp.run_child([x for x in cmd if x != "--ids"] + ["--compute-type", qkv_types[p], "--device", a.device], hyp)
        print(f"{p:<12} {tokens:>7} {s:>8.2f} {tps[p]:>9.1f} {max(rss[p]):>6.0f} MB  {bleu(a.qkv, a.ref, hyp)}")
    print(f"qkv int8 / qkv float32: {tps['qkv int8'] / tps['qkv']:.2f}x the tokens/s")
    if a.bf16:
        print(f"qkv bf16 / qkv float32: {tps['qkv bf16'] / tps['qkv']:.2f}x the tokens/s")
    if a.no_ct2:
        print(f"qkv's own clock (after loading): median {statistics.median(own):.2f} s")
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; files in {work}")
        return
    print(f"qkv's own clock (after loading): median {statistics.median(own):.2f} s; CTranslate2 outputs longer "
          f"than qkv's per-sentence limit (one max_decoding_length per batch): "
          + ", ".join(f"{p} {over[p]}" for p in ct2_peers))
    f32 = "ct2 float32"
    print(f"qkv / CTranslate2 float32: {tps['qkv'] / tps[f32]:.2f}x the tokens/s, "
          f"{max(rss['qkv']) / max(rss[f32]):.2f}x the peak RSS")
    print(f"qkv int8 / CTranslate2 int8: {tps['qkv int8'] / tps['ct2 int8']:.2f}x the tokens/s, "
          f"{max(rss['qkv int8']) / max(rss['ct2 int8']):.2f}x the peak RSS")
    print(f"CTranslate2 int8 / float32: {tps['ct2 int8'] / tps[f32]:.2f}x the tokens/s")
    same, total = tp.identical_lines(out["qkv"], out[f32])
    print(f"qkv and CTranslate2 float32 agree on {same} of {total} lines (token ids)")
    n, q_wins, c_wins = better_of_differing(a.qkv, a.checkpoint, work, src, out["qkv"], out[f32],
                                            a.length_penalty, a.threads)
    if n:
        print(f"  of the {n} that differ, qkv's model scores (log_prob / (tokens + 1)^{a.length_penalty:g}) "
              f"qkv's hypothesis higher on {q_wins}, CTranslate2's on {c_wins}")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; files in {work}")


if __name__ == "__main__":
    sys.exit(main())
