#!/usr/bin/env python3
"""Times PyTorch 2.x training steps of the GPT qkv's decoder-only model is (tests/python/gpt_model.py,
qkv's parameter names): the peer of bench_lm_train, which runs this script itself.

Usage: build/bench-venv/bin/python bench/lm_train_torch.py --steps N --threads T
           [--batch 8 --block 256 --layers 6 --d-model 512 --heads 8 --d-ff 2048 --vocab 8000
            --dropout 0.1 --lr 3e-4 --weight-decay 0.1 --attention seed|sdpa --seed 0
            --device cpu|cuda --autocast none|bf16]

The model is gpt_model.GPT (pre-LN, learned positions, GELU tanh, lm_head tied to the token
embedding) in train mode with the given dropout, trained with AdamW (nanoGPT's two groups: weight
decay on parameters of 2 or more dimensions only, as qkv's AdamW), betas (0.9, 0.98), eps 1e-9 as
qkv's defaults. The batch is one fixed block of random ids (B, block + 1) in [0, vocab): inputs are
its first block columns, labels the last block columns, loss = cross_entropy over all of them.
--attention seed: the seed's attention (matmul, masked_fill -1e9, softmax, matmul), exactly the
model qkv's tests compare against; sdpa: the same parameters with
torch.nn.functional.scaled_dot_product_attention(is_causal=True), PyTorch 2.x's fused kernel.
One warm-up step, then N timed steps (zero_grad; loss = ...; backward; step; loss.item()).
Prints one JSON line:
  {"step_seconds", "median_step_seconds", "tokens_per_step" (= batch * block),
   "tokens_per_second", "peak_rss_bytes" (VmHWM: bench/peak_rss.py), "rss_after_import_bytes",
   "torch_version", "threads", "losses", "config"}
"""

import argparse
import json
import os
import statistics
import sys

from peak_rss import peak_rss_bytes  # bench/, beside this script
from step_protocol import timed_steps  # bench/


def rss_now_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    p = argparse.ArgumentParser(description="PyTorch GPT training-step benchmark (peer of bench_lm_train)")
    p.add_argument("--steps", type=int, required=True, help="timed steps (after 1 warm-up; with --serve, as asked)")
    p.add_argument("--serve", action="store_true",
                   help="time one step per 'step' line on stdin, interleaved with qkv's (bench/step_protocol.py)")
    p.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=256, help="tokens per row (context = block)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--attention", choices=("seed", "sdpa"), default="seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU run of scripts/gpu_check.sh)")
    p.add_argument("--autocast", choices=("none", "bf16"), default="none",
                   help="bf16: torch.autocast(dtype=torch.bfloat16), PyTorch's mixed precision")
    a = p.parse_args()
    if a.steps < 1 or a.threads < 1 or a.block < 1:
        p.error("need --steps >= 1, --threads >= 1, --block >= 1")

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    import gpt_model  # noqa: E402
    import seed_transformer as st  # noqa: E402

    rss_after_import = rss_now_bytes()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    if a.attention == "sdpa":
        def sdpa(self, Q, K, V, mask=None):
            return F.scaled_dot_product_attention(Q, K, V, is_causal=True)
        st.MultiHeadAttention.scaled_dot_product_attention = sdpa

    model = gpt_model.GPT(a.vocab, a.d_model, a.heads, a.layers, a.d_ff, a.block, dropout=a.dropout,
                          activation="gelu_tanh", positions="learned", tie_output_embedding=True)
    # GPT-2's initialisation, as qkv's CausalLM (PyTorch's N(0, 1) embeddings would start a tied
    # model at a loss of several times log V; the timing does not depend on it).
    with torch.no_grad():
        for name, q in model.named_parameters():
            if name.endswith("bias"):
                q.zero_()
            elif q.dim() >= 2:
                std = 0.02 / (2 * a.layers) ** 0.5 if name.endswith(("W_o.weight", "fc2.weight")) else 0.02
                q.normal_(0.0, std)
    model.to(a.device)
    model.train()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.98), eps=1e-9)
    blocks = torch.randint(0, a.vocab, (a.batch, a.block + 1)).to(a.device)
    inputs, labels = blocks[:, :-1].contiguous(), blocks[:, 1:].contiguous()

    device_type = "cuda" if a.device.startswith("cuda") else "cpu"

    def step():
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, a.vocab).float(), labels.view(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    times, losses = timed_steps(step, a.steps, a.serve)

    tokens = a.batch * a.block
    median = statistics.median(times)
    print(json.dumps({
        "step_seconds": times,
        "median_step_seconds": median,
        "tokens_per_step": tokens,
        "tokens_per_second": tokens / median,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_after_import_bytes": rss_after_import,
        "torch_version": torch.__version__,
        "gpu_peak_bytes": torch.cuda.max_memory_allocated() if device_type == "cuda" else 0,
        "threads": a.threads,
        "losses": losses,
        "config": vars(a),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
