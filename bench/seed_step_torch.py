#!/usr/bin/env python3
"""Times seed 000's PyTorch training step (the baseline qkv's step is compared against).

Usage: /usr/bin/python3 bench/seed_step_torch.py --steps N --threads T
           [--batch 64 --len 100 --layers 6 --d-model 512 --heads 8 --d-ff 2048
            --vocab 5000 --max-len 100 --dropout 0.1 --seed 0 --device cpu|cuda --autocast none|bf16
            --attention seed|sdpa]

Defaults are the seed's training example: Transformer(5000, 5000, 512, 8, 6, 2048, 100,
0.1), src/tgt = torch.randint(1, 5000, (64, 100)), CrossEntropyLoss(ignore_index=0),
Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9), train mode. One warm-up step, then N timed
steps, each exactly the seed's loop body:
    zero_grad; output = model(src, tgt[:, :-1]); loss = criterion(...); backward; step;
    loss.item()
The model is the seed's, attention included (matmul, masked_fill, softmax, matmul), on either
device; --attention sdpa replaces those four with torch.nn.functional.scaled_dot_product_attention
on the same mask (True where the seed keeps a score): PyTorch's fused attention, its fastest CPU
mode under autocast (the seed's attention has no dropout, so neither has this). --device cuda: the model and the batch on the GPU (made on the CPU from the same
seed, then moved), each step ending with torch.cuda.synchronize(). --autocast bf16: the forward and
the loss under torch.autocast(<the device's type>, dtype=torch.bfloat16).
Prints one JSON line:
  {"step_seconds": [...], "median_step_seconds", "target_tokens_per_step" (non-pad
   labels, = batch*(len-1)), "tokens_per_second" (= tokens / median), "peak_rss_bytes"
   (VmHWM: bench/peak_rss.py), "torch_version", "attention", "gpu_peak_bytes"
   (torch.cuda.max_memory_allocated; 0 on the CPU), "threads", "losses", "config"}
"""

import argparse
import json
import os
import statistics
import sys

from peak_rss import peak_rss_bytes  # bench/, beside this script
from step_protocol import timed_steps  # bench/

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import seed_transformer as st  # noqa: E402


def main():
    p = argparse.ArgumentParser(description="seed 000 PyTorch training-step benchmark")
    p.add_argument("--steps", type=int, required=True, help="timed steps (after 1 warm-up; with --serve, as asked)")
    p.add_argument("--serve", action="store_true",
                   help="time one step per 'step' line on stdin, interleaved with qkv's (bench/step_protocol.py)")
    p.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--len", type=int, default=100, help="src and tgt sequence length")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=5000, help="src and tgt vocabulary size")
    p.add_argument("--max-len", type=int, default=100, help="max_seq_length (>= --len)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU run of scripts/gpu_check.sh)")
    p.add_argument("--attention", choices=("seed", "sdpa"), default="seed",
                   help="sdpa: F.scaled_dot_product_attention in place of the seed's four operations")
    p.add_argument("--autocast", choices=("none", "bf16"), default="none",
                   help="bf16: the forward and loss under torch.autocast(device type, dtype=torch.bfloat16)")
    a = p.parse_args()
    if a.steps < 1 or a.threads < 1 or a.len < 2 or a.max_len < a.len:
        p.error("need --steps >= 1, --threads >= 1, --len >= 2, --max-len >= --len")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = {
        "src_vocab_size": a.vocab, "tgt_vocab_size": a.vocab, "d_model": a.d_model,
        "num_heads": a.heads, "num_layers": a.layers, "d_ff": a.d_ff,
        "max_seq_length": a.max_len, "dropout": a.dropout,
    }
    device_type = "cuda" if a.device.startswith("cuda") else "cpu"
    transformer = st.Transformer(**config).to(a.device)
    if device_type == "cuda":
        # Seed 000 makes its no-peek mask with torch.ones and no device, on the CPU, which PyTorch
        # refuses to combine with a mask on the GPU: the seed's code runs with the GPU as the default
        # device of its factories (the same values, made where the batch is).
        seed_generate_mask = transformer.generate_mask

        def generate_mask_on_the_gpu(src, tgt):
            with torch.device(tgt.device):
                return seed_generate_mask(src, tgt)

        transformer.generate_mask = generate_mask_on_the_gpu
    if a.attention == "sdpa":
        def fused(self, Q, K, V, mask=None):
            return F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else mask != 0)

        st.MultiHeadAttention.scaled_dot_product_attention = fused
    tgt_vocab_size = a.vocab
    src_data = torch.randint(1, a.vocab, (a.batch, a.len)).to(a.device)
    tgt_data = torch.randint(1, a.vocab, (a.batch, a.len)).to(a.device)

    criterion = nn.CrossEntropyLoss(ignore_index=0)
    optimizer = optim.Adam(transformer.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)
    transformer.train()

    def step():
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            output = transformer(src_data, tgt_data[:, :-1])
            loss = criterion(output.contiguous().view(-1, tgt_vocab_size).float(),
                             tgt_data[:, 1:].contiguous().view(-1))
        loss.backward()
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()  # the step's queued kernels, to its end (as qkv's cuda::synchronize)
        return loss.item()

    times, losses = timed_steps(step, a.steps, a.serve)

    tokens = int((tgt_data[:, 1:] != 0).sum().item())
    median = statistics.median(times)
    print(json.dumps({
        "step_seconds": times,
        "median_step_seconds": median,
        "target_tokens_per_step": tokens,
        "tokens_per_second": tokens / median,
        "peak_rss_bytes": peak_rss_bytes(),
        "torch_version": torch.__version__,
        "attention": ("F.scaled_dot_product_attention" if a.attention == "sdpa"
                      else "the seed's: matmul, masked_fill, softmax, matmul"),
        "gpu_peak_bytes": torch.cuda.max_memory_allocated() if device_type == "cuda" else 0,
        "threads": a.threads,
        "losses": losses,
        "config": dict(config, batch=a.batch, len=a.len, seed=a.seed, autocast=a.autocast, attention=a.attention,
                       device=a.device),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
