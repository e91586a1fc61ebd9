#!/usr/bin/env python3
"""Translation speed of an imported Marian model (OPUS-MT's shape) in qkv against CTranslate2 and
transformers on the same weights, all in one run (issue 35's performance target).

    bench/bench_marian.py [--sentences 500] [--beam 4] [--batch-size 32] [--threads 2] [--runs 3]
        [--limit 48] [--compute-types float32,int8,bf16] [--ct2-int8] [--work DIR] [--no-hf]
        [--tiny] [--qkv-only]

Needs build/qkv and the peers' venv (bench/setup_peers.sh: build/bench-venv with torch,
transformers, sentencepiece and ctranslate2); the peer steps run in that venv's Python.
--qkv-only runs qkv alone (the model still made by transformers, no CTranslate2) and --tiny makes a
small model (d_model 64, 2 + 2 layers, vocabulary 1,000): CTest's bench.marian runs both, without
the venv.

  * The model: transformers' MarianMTModel from a MarianConfig of OPUS-MT's shape (d_model 512,
    6 + 6 layers, 8 heads, ffn 2048, swish, vocabulary 58,101 shared by the encoder, the decoder and
    the output layer, pad = decoder start = the last id, EOS 0), its random initialisation
    (torch.manual_seed(0)), and a MarianTokenizer whose vocab.json holds 58,101 pieces. Made once
    and cached in WORK; `qkv import --from hf` and CTranslate2's TransformersConverter (float32)
    convert that one directory.
  * The input: --sentences random sentences of ids (lengths 5 to 40, fixed seed) ending with EOS,
    what MarianTokenizer gives a model; the same ids (CTranslate2: their pieces) go to every peer.
  * The search: beam --beam, length penalty 1, pad never chosen, every hypothesis cut at --limit
    tokens (a random model rarely ends a sentence, so all peers decode the same number of steps):
    qkv `--max-length-ratio 0 --max-length-offset LIMIT`, CTranslate2 max_decoding_length LIMIT,
    transformers max_new_tokens LIMIT + 1 with its forced EOS. Batches as qkv makes them: the
    sentences sorted by length (stable), cut into --batch-size; one call per batch for the peers.
  * Peers: qkv in each of --compute-types (float32 first; int8 and bf16 are its faster compute
    types), CTranslate2 float32 (and int8 with --ct2-int8), transformers float32 (torch, --threads).
  * Time: qkv's by its own clock (the summary line it prints after loading), the peers' around
    their translate calls (loading excluded); tokens are the output ids without EOS. Each peer runs
    in its own process; peers alternate within each of --runs rounds; medians are printed.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import translate_peers as tp  # noqa: E402

EOS = 0


def vocab_size(a):
    return 1000 if a.tiny else 58101


def product_gflop(hf_dir, source_tokens, output_tokens, beam):
    """A lower bound on the matrix-product work of the translation, in GFLOP, from the model's
    config.json and the token counts of the source and the output: the encoder's layers per source token;
    the decoder's layers (self-attention's four projections, cross-attention's query and output, the
    feed-forward pair) and the output layer per generated token and beam; the encoder output's keys
    and values once per sentence. Attention's own score and value products are left out (small at
    these lengths), and so is the step that ends each hypothesis."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        c = json.load(f)
    d, vocab = c["d_model"], c["vocab_size"]
    encoder_per_token = c["encoder_layers"] * (4 * d * d + 2 * d * c["encoder_ffn_dim"])
    cross_kv_per_token = c["decoder_layers"] * 2 * d * d
    decoder_per_row = c["decoder_layers"] * (6 * d * d + 2 * d * c["decoder_ffn_dim"]) + d * vocab
    macs = source_tokens * (encoder_per_token + cross_kv_per_token) + output_tokens * beam * decoder_per_row
    return 2 * macs / 1e9


# ------------------------------------------------------------------ peer side (the venv's Python) ---

def make_model(a):
    """The Hugging Face directory (model + tokenizer) and its CTranslate2 conversion."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    out = a.work
    VOCAB = vocab_size(a)
    PAD = VOCAB - 1
    hf = os.path.join(out, "hf")
    os.makedirs(hf, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        rng = random.Random(1)
        words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(400)]
        with open(text, "w") as f:
            for _ in range(2000):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) + "\n")
        spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(tmp, "spm"), vocab_size=300,
                                       num_threads=2, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "spm.model"))
        vocab = {"</s>": 0, "<unk>": 1}
        for i in range(sp.get_piece_size()):
            if sp.id_to_piece(i) not in ("<unk>", "<s>", "</s>"):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
        while len(vocab) < PAD:
            vocab[f"\u2581w{len(vocab)}"] = len(vocab)
        vocab["<pad>"] = PAD
        with open(os.path.join(tmp, "vocab.json"), "w") as f:
            json.dump(vocab, f)
        spm_path = os.path.join(tmp, "spm.model")
        MarianTokenizer(spm_path, spm_path, os.path.join(tmp, "vocab.json")).save_pretrained(hf)
    width, layers, heads = (64, 2, 4) if a.tiny else (512, 6, 8)
    config = MarianConfig(vocab_size=VOCAB, decoder_vocab_size=VOCAB, d_model=width, encoder_layers=layers,
                          decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                          encoder_ffn_dim=4 * width, decoder_ffn_dim=4 * width, max_position_embeddings=512,
                          activation_function="swish",
                          scale_embedding=True, share_encoder_decoder_embeddings=True, pad_token_id=PAD,
                          eos_token_id=EOS, decoder_start_token_id=PAD, forced_eos_token_id=EOS)
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.generation_config.bad_words_ids = [[PAD]]
    model.save_pretrained(hf, safe_serialization=True)
    if a.qkv_only:
        return
    import ctranslate2
    ctranslate2.converters.TransformersConverter(hf).convert(os.path.join(out, "ct2-float32"), force=True)


def batches(sources, size):
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # stable, as qkv's Translator
    return [order[b:b + size] for b in range(0, len(order), size)]


def run_ct2(a, sources):
    import ctranslate2

    compute_type = "int8" if a.peer == "ct2-int8" else "float32"
    with open(os.path.join(a.work, "hf", "vocab.json")) as f:
        piece_of = {i: p for p, i in json.load(f).items()}
    id_of = {p: i for i, p in piece_of.items()}
    # CTranslate2's converter drops <pad> from a Marian vocabulary (it is never produced, and the
    # decoder starts from its all-zero embedding row), so nothing needs suppressing here.
    translator = ctranslate2.Translator(os.path.join(a.work, "ct2-float32"), device="cpu", compute_type=compute_type,
                                        inter_threads=1, intra_threads=a.threads)
    results = [None] * len(sources)
    start = time.perf_counter()
    for batch in batches(sources, a.batch_size):
        out = translator.translate_batch([[piece_of[t] for t in sources[i]] for i in batch], beam_size=a.beam,
                                         num_hypotheses=1, length_penalty=1.0, max_decoding_length=a.limit,
                                         max_batch_size=a.batch_size)
        for i, r in zip(batch, out):
            results[i] = [id_of[p] for p in r.hypotheses[0]]
    return time.perf_counter() - start, results


def run_hf(a, sources):
    import torch
    from transformers import MarianMTModel

    torch.set_num_threads(a.threads)
    model = MarianMTModel.from_pretrained(os.path.join(a.work, "hf")).eval()
    results = [None] * len(sources)
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches(sources, a.batch_size):
            width = max(len(sources[i]) for i in batch)
            PAD = vocab_size(a) - 1
            ids = torch.tensor([sources[i] + [PAD] * (width - len(sources[i])) for i in batch])
            out = model.generate(ids, attention_mask=(ids != PAD).long(), num_beams=a.beam, max_new_tokens=a.limit + 1,
                                 length_penalty=1.0, do_sample=False)
            for i, row in zip(batch, out.tolist()):
                results[i] = [t for t in row[1:] if t not in (PAD, EOS)]
    return time.perf_counter() - start, results


def peer_main(a):
    if a.peer == "make":
        make_model(a)
        return
    sources = tp_read_ids(a.ids)
    seconds, results = (run_hf if a.peer == "hf" else run_ct2)(a, sources)
    with open(a.out, "w") as f:
        for r in results:
            f.write(" ".join(map(str, r)) + "\n")
    print(json.dumps({"seconds": seconds, "tokens": sum(map(len, results))}))


def tp_read_ids(path):
    with open(path) as f:
        return [[int(t) for t in line.split()] for line in f]


# ---------------------------------------------------------------------------------- the driver ---

def print_product_bound(a, source_tokens, tokens, tps, ceilings):
    """What the float32 tokens/s can be at most on this machine: the products' work at the SGEMM
    ceiling measured before and after the rounds, against each peer's rate (issue 35's 4x
    transformers in float32 is above it where transformers runs near the ceiling itself)."""
    gflop = product_gflop(os.path.join(a.work, "hf"), source_tokens, tokens, a.beam)
    print(f"matrix products (a lower bound, from config.json and the lengths): {gflop:.1f} GFLOP, "
          f"{gflop / tokens * 1e3:.0f} MFLOP an output token; qkv float32 ran them at "
          f"{gflop / (tokens / tps['qkv']):.0f} GFLOP/s")
    known = [c for c in ceilings if c is not None]
    if not known:
        return
    best = max(known)
    bound = tokens / (gflop / best)
    print(f"SGEMM ceiling (OpenBLAS, {a.threads} threads) before and after the rounds: " +
          " and ".join(f"{c:.0f}" for c in known) + f" GFLOP/s: float32 at the higher one is at most "
          f"{bound:.1f} tokens/s" + "".join(f", {bound / tps[p]:.2f}x {p}" for p in tps if not p.startswith("qkv")))


def cpu_model(qkv):
    """The CPU as `qkv --version` names it: brand and core (family and model), e.g. "AMD EPYC (Zen 3:
    family 25, model 1)"; lscpu's model name where qkv cannot say."""
    out = subprocess.run([qkv, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"^CPU:\s*(.+)$", out, re.M)
    if m:
        return m.group(1).strip()
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    m = re.search(r"Model name:\s*(.+)", out)
    return m.group(1).strip() if m else "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=int, default=48, help="output tokens per sentence at most (EOS excluded)")
    ap.add_argument("--work", help="where the model and outputs are kept (default build/bench-marian[-tiny])")
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--no-hf", action="store_true", help="leave transformers out (it is the slowest peer)")
    ap.add_argument("--compute-types", default="float32,int8,bf16", help="qkv's compute types, float32 first")
    ap.add_argument("--ct2-int8", action="store_true", help="also CTranslate2's int8")
    ap.add_argument("--tiny", action="store_true", help="a small model (d_model 64, 2 + 2 layers, vocabulary 1000)")
    ap.add_argument("--qkv-only", action="store_true", help="qkv alone: no CTranslate2, no transformers timing")
    ap.add_argument("--peer", choices=["make", "ct2", "ct2-int8", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.work = a.work or os.path.join(ROOT, "build", "bench-marian-tiny" if a.tiny else "bench-marian")
    if a.peer:
        return peer_main(a)
    if min(a.sentences, a.beam, a.batch_size, a.threads, a.runs, a.limit) < 1:
        ap.error("every number must be at least 1")
    if not os.path.exists(a.qkv):
        sys.exit(f"{a.qkv}: no such file (build qkv first)")
    python = sys.executable if a.qkv_only else tp.peer_python()
    me = [python, os.path.abspath(__file__), "--work", a.work, "--threads", str(a.threads), "--beam", str(a.beam),
          "--batch-size", str(a.batch_size), "--limit", str(a.limit)] + (["--tiny"] if a.tiny else []) + \
         (["--qkv-only"] if a.qkv_only else [])
    os.makedirs(a.work, exist_ok=True)
    made = os.path.join(a.work, "hf" if a.qkv_only else "ct2-float32", "model.safetensors" if a.qkv_only else "model.bin")
    if not os.path.exists(made):
        print("making the model (transformers)" + ("" if a.qkv_only else " and its CTranslate2 conversion") +
              ", once ...", file=sys.stderr)
        tp.run_child(me + ["--peer", "make"])
    ckpt = os.path.join(a.work, "qkv")
    if not os.path.exists(os.path.join(ckpt, "model.safetensors")):
        tp.run_child([a.qkv, "import", "--from", "hf", os.path.join(a.work, "hf"), "--output-dir", ckpt])

    VOCAB = vocab_size(a)
    PAD = VOCAB - 1
    rng = random.Random(7)
    src = os.path.join(a.work, f"source.{a.sentences}.ids")
    with open(src, "w") as f:
        for _ in range(a.sentences):
            f.write(" ".join(str(rng.randrange(2, PAD)) for _ in range(rng.randint(5, 40))) + f" {EOS}\n")

    ceilings = [tp.sgemm_ceiling(a.qkv, a.threads)]
    types = a.compute_types.split(",")
    if types[0] != "float32":
        ap.error("--compute-types must start with float32")
    ours = ["qkv" if t == "float32" else f"qkv {t}" for t in types]
    theirs = [] if a.qkv_only else \
        ["ct2 float32"] + (["ct2 int8"] if a.ct2_int8 else []) + ([] if a.no_hf else ["transformers"])
    peers = ours + theirs
    out = {p: os.path.join(a.work, p.replace(" ", "-") + ".out.ids") for p in peers}
    secs = {p: [] for p in peers}
    for r in range(a.runs):
        for p, t in zip(ours, types):
            run = tp.run_child([a.qkv, "translate", "--checkpoint", ckpt, "--ids", "--input", src, "--beam-size", str(a.beam),
                                "--batch-size", str(a.batch_size), "--threads", str(a.threads), "--max-length-ratio",
                                "0", "--max-length-offset", str(a.limit), "--compute-type", t], out[p])
            secs[p].append(tp.qkv_summary_seconds(run.stderr))
        for p, name in (("ct2 float32", "ct2"), ("ct2 int8", "ct2-int8"), ("transformers", "hf")):
            if p in peers:
                report = json.loads(tp.run_child(me + ["--peer", name, "--ids", src, "--out", out[p]]).stdout)
                secs[p].append(report["seconds"])
        print(f"round {r + 1}/{a.runs}: " + ", ".join(f"{p} {secs[p][-1]:.2f} s" for p in peers), file=sys.stderr)
    ceilings.append(tp.sgemm_ceiling(a.qkv, a.threads))

    shape = "a small Marian (d_model 64, 2 + 2 layers" if a.tiny else "a Marian of OPUS-MT's shape (d_model 512, 6 + 6 layers"
    print(f"{shape}, vocabulary {VOCAB}, random weights), "
          f"{a.sentences} sentences, beam {a.beam}, batches of {a.batch_size}, at most {a.limit} tokens, "
          f"{a.threads} threads, {cpu_model(a.qkv)}, median of {a.runs} runs")
    tps, tokens = {}, {}
    for p in peers:
        tokens[p], s = tp.count_tokens(out[p]), statistics.median(secs[p])
        tps[p] = tokens[p] / s
        print(f"{p:<13} {tokens[p]:>7} tokens {s:>8.2f} s {tps[p]:>9.1f} tokens/s")
    print_product_bound(a, tp.count_tokens(src), tokens["qkv"], tps, ceilings)
    distinct = len(set(tp.read_lines(out["qkv"])))
    print(f"qkv float32 wrote {distinct} distinct output line(s)" +
          (": the random model repeats one token, so the agreement below says nothing about the search "
           "(tests/model/hf_marian_test.cpp checks outputs on a trained model)" if distinct == 1 else ""))
    for q in ours:
        for p in peers:
            if p in ours:
                continue
            same, total = tp.identical_lines(out[q], out[p])
            print(f"{q} / {p}: {tps[q] / tps[p]:.2f}x the tokens/s; identical outputs on {same} of {total} sentences")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; files in {a.work}")


if __name__ == "__main__":
    sys.exit(main())
