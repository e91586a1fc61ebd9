#!/usr/bin/env python3
"""Can a PyTorch user load a qkv checkpoint into seed 000's Transformer, and does it compute what
qkv computes?

Usage: /usr/bin/python3 tests/python/check_roundtrip.py CHECKPOINT_DIR QKV_BIN

Builds seed_transformer.Transformer from CHECKPOINT_DIR/config.json, loads
CHECKPOINT_DIR/model.safetensors with load_state_dict -- strict on every parameter (all
present, right shapes and dtype, nothing extra); the positional_encoding.pe buffer, which
qkv checkpoints omit, keeps the table the constructor computed (see
seed_transformer.load_qkv_checkpoint) -- and checks the loaded values equal the file's and
are finite.

Then both sides score the same pairs: `QKV_BIN score --per-line` (dropout off, right-padded
batches) prints each pair's sum of label log-probabilities, and PyTorch computes the same sums
from the seed model's logits (log_softmax, eval mode). The pairs cover every entry of the output
distribution: for 3 sources (lengths max_seq_length, about half of it, and 1) and every target
prefix length t, one pair per label v = 1 .. tgt_vocab_size-1 with target prefix + [v], so the
log-probability of every class but the pad at every decoder position is in some line's sum (with
the prefix's own log-probabilities, the same in both). The largest |difference| of a line sum
must be within LINE_TOLERANCE and the mean loss within LOSS_TOLERANCE. config.json may not choose
an option the seed lacks (SEED_CHOICES).

Prints "ok <tensors in the file> tensors, <pairs> pairs: max |log-prob sum difference| D,
loss difference L"; exits non-zero with a message otherwise.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_transformer as st  # noqa: E402

# Measured on `qkv init --seed 1..8` of model_small (d_model 32, 2 layers, vocabularies 37/41,
# max_seq_length 16; seed 3 is CTest's qkv_init_small), 1920 pairs, float32 in both, qkv with one
# thread (2026-11-26, Zen 4): largest line-sum difference 1.59e-6 .. 1.96e-6 (sums of up to 16
# log-probabilities, |sum| up to 64; qkv prints 6 decimals, so up to 5e-7 of it is rounding), loss
# difference 2.8e-9 .. 5.3e-8 (qkv prints 7 decimals: up to 5e-8 is rounding). The bounds are 5x
# the worst measured: room for another BLAS or SIMD summation order, while a real difference shows
# far above them (GELU for ReLU: 0.49 and 7.6e-3; embeddings scaled by sqrt(d_model): 2.6 and 0.034;
# LayerNorm eps 1e-6 for 1e-5: 3.3e-5 and 1.4e-6).
LINE_TOLERANCE = 1e-5
LOSS_TOLERANCE = 3e-7

# config.json fields whose value the seed's classes hard-code (qkv's defaults): a checkpoint that
# sets another value is a model the seed cannot compute, refused here by name rather than compared.
SEED_CHOICES = {"architecture": "encoder-decoder", "norm": "post", "activation": "relu", "layer_norm": "standard",
                "layer_norm_eps": 1e-5, "mask_fill": "-1e9", "scale_embeddings": False,
                "tie_output_embedding": False, "share_embeddings": False, "ffn_dropout": 0.0,
                "attention_dropout": 0.0}


def write_ids(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(" ".join(str(int(i)) for i in row) + "\n")


def pairs_of(config):
    """(src rows, tgt rows): every label at every prefix length for 3 sources of different lengths."""
    L = int(config["max_seq_length"])
    V_src, V_tgt = int(config["src_vocab_size"]), int(config["tgt_vocab_size"])
    rng = np.random.default_rng(2026)
    srcs = [rng.integers(1, V_src, size=n).tolist() for n in sorted({L, max(1, L // 2 + 1), 1}, reverse=True)]
    src_rows, tgt_rows = [], []
    for s in srcs:
        full = rng.integers(1, V_tgt, size=L).tolist()  # a target of max_seq_length input positions
        for t in range(1, L + 1):  # t input tokens: labels 1 .. t; the last label takes every value
            for v in range(1, V_tgt):
                src_rows.append(s)
                tgt_rows.append(full[:t] + [v])
    return src_rows, tgt_rows


def torch_scores(model, src_rows, tgt_rows, chunk=512):
    """Per-pair sums of label log-probabilities and the mean loss over all labels, as qkv score."""
    sums, total, count = [], 0.0, 0
    with torch.no_grad():
        for i in range(0, len(src_rows), chunk):
            S, T = src_rows[i:i + chunk], tgt_rows[i:i + chunk]
            src = torch.zeros(len(S), max(map(len, S)), dtype=torch.long)
            tgt = torch.zeros(len(T), max(map(len, T)), dtype=torch.long)
            for r, (s, t) in enumerate(zip(S, T)):
                src[r, :len(s)] = torch.tensor(s)
                tgt[r, :len(t)] = torch.tensor(t)
            logp = torch.log_softmax(model(src, tgt[:, :-1]).double(), dim=-1)
            labels = tgt[:, 1:]
            picked = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1) * (labels != 0)
            sums += picked.sum(dim=1).tolist()
            total += float(picked.sum())
            count += int((labels != 0).sum())
    return np.array(sums), -total / count


def qkv_scores(qkv, ckpt, src_rows, tgt_rows):
    with tempfile.TemporaryDirectory(prefix="qkv_roundtrip_") as d:
        write_ids(os.path.join(d, "src.txt"), src_rows)
        write_ids(os.path.join(d, "tgt.txt"), tgt_rows)
        r = subprocess.run([qkv, "score", "--checkpoint", ckpt, "--src", os.path.join(d, "src.txt"),
                            "--tgt", os.path.join(d, "tgt.txt"), "--per-line", "--threads", "1"],
                           capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"qkv score exited {r.returncode}: {r.stderr.strip()}")
    lines = r.stdout.split()
    if len(lines) != len(tgt_rows) + 2 or lines[-2] != "loss":
        raise RuntimeError(f"qkv score printed {len(lines)} words for {len(tgt_rows)} pairs")
    return np.array([float(x) for x in lines[:-2]]), float(lines[-1])


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt, qkv = argv[1], argv[2]
    try:
        config = st.read_config(ckpt)
        for key, seed in SEED_CHOICES.items():
            value = config.get(key, seed)
            same = (abs(value - seed) <= 1e-6 * seed) if key == "layer_norm_eps" else value == seed
            if not same:  # qkv writes eps as the float32 value 9.999999747e-06
                raise ValueError(f"config.json has {key} = {value!r}; seed 000's model has {seed!r}")
        model = st.transformer_from_config(config)
        arrays = st.load_qkv_checkpoint(model, ckpt)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1

    state = model.state_dict()
    for name, array in arrays.items():
        if name == st.PE_KEY:
            continue
        if not np.isfinite(array).all():
            print(f"FAIL tensor '{name}' has non-finite values", file=sys.stderr)
            return 1
        if not np.array_equal(state[name].numpy(), array):
            print(f"FAIL tensor '{name}' differs after loading", file=sys.stderr)
            return 1

    model.eval()
    torch.set_num_threads(1)
    src_rows, tgt_rows = pairs_of(config)
    want, want_loss = torch_scores(model, src_rows, tgt_rows)
    try:
        got, got_loss = qkv_scores(qkv, ckpt, src_rows, tgt_rows)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    if not np.isfinite(want).all() or not np.isfinite(got).all():
        print("FAIL non-finite log-probabilities", file=sys.stderr)
        return 1
    diff = np.abs(got - want)
    worst = int(diff.argmax())
    loss_diff = abs(got_loss - want_loss)
    summary = (f"{len(arrays)} tensors, {len(tgt_rows)} pairs: max |log-prob sum difference| {diff[worst]:.3g} "
               f"(pair {worst + 1}: qkv {got[worst]:.6f}, PyTorch {want[worst]:.6f}), loss qkv {got_loss:.7f} "
               f"PyTorch {want_loss:.7f} (difference {loss_diff:.3g}); tolerances {LINE_TOLERANCE:g}, {LOSS_TOLERANCE:g}")
    if diff[worst] > LINE_TOLERANCE or loss_diff > LOSS_TOLERANCE:
        print(f"FAIL qkv and PyTorch differ: {summary}", file=sys.stderr)
        return 1
    print(f"ok {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
