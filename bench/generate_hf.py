#!/usr/bin/env python3
"""Times greedy generation of Hugging Face transformers' GPT2LMHeadModel (random weights, PyTorch 2.x):
the peer of bench_generate, which runs this script itself.

Usage: build/bench-venv/bin/python bench/generate_hf.py --threads T --reps R
           [--batches 1,16 --prompt 16 --new-tokens 256 --layers 12 --d-model 768 --heads 12
            --vocab 50257 --context 1024 --seed 0] [--serve]

GPT2LMHeadModel(GPT2Config(n_layer, n_embd, n_head, vocab_size, n_positions)) (GPT-2's defaults
otherwise: gelu_new = GELU tanh, tied output, learned positions), eval mode, float32, under
torch.inference_mode(); per batch size one warm-up generate of 8 tokens, then R timed runs of
    model.generate(ids, attention_mask=ones, do_sample=False, max_new_tokens=N, min_new_tokens=N,
                   pad_token_id=eos)
With --serve (one batch size only), the timed runs are asked for one at a time on stdin
(bench/step_protocol.py: {"ready": true} after the warm-up, then one run per "step" line, answered
{"seconds": s}, until "done"): bench_generate starts one such process per batch size and alternates
its own runs with these, so a drift in the shared machine's speed reaches both sides alike.
The prompt ids are bench_generate's: row r, position t holds (r * 7919 + t * 104729 + 12345) % V.
Prints one JSON line at the end:
  {"batches": {"B": {"seconds", "median_seconds", "tokens_per_second" (= B * N / median)}},
   "peak_rss_bytes", "torch_version", "transformers_version", "threads", "config"}
"""

import argparse
import json
import statistics
import sys

from peak_rss import peak_rss_bytes  # bench/, beside this script
from step_protocol import timed_steps  # bench/


def main():
    p = argparse.ArgumentParser(description="transformers GPT-2 greedy generation benchmark (peer of bench_generate)")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--reps", type=int, required=True)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autocast", choices=("none", "bf16"), default="none",
                   help="bf16: generate under torch.autocast('cpu', dtype=torch.bfloat16)")
    p.add_argument("--serve", action="store_true",
                   help="time one run per 'step' line on stdin, alternating with qkv's (bench/step_protocol.py)")
    a = p.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    if a.serve and len(batches) != 1:
        p.error("--serve takes one batch size (bench_generate starts one process per batch size)")
    if a.reps < 1 or a.new_tokens < 1 or a.prompt < 1:
        p.error("need --reps, --new-tokens, --prompt >= 1")

    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = GPT2Config(n_layer=a.layers, n_embd=a.d_model, n_head=a.heads, vocab_size=a.vocab,
                        n_positions=a.context, bos_token_id=a.vocab - 1, eos_token_id=a.vocab - 1)
    model = GPT2LMHeadModel(config).eval()

    results = {}
    for B in batches:
        ids = torch.tensor([[(r * 7919 + t * 104729 + 12345) % a.vocab for t in range(a.prompt)] for r in range(B)])
        mask = torch.ones_like(ids)

        def run(n):
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
                out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                                     min_new_tokens=n, pad_token_id=config.eos_token_id)
            assert out.shape == (B, a.prompt + n), out.shape
            return out

        def timed_run():
            run(a.new_tokens)  # returns nothing: the protocol's answer is just the seconds

        times, _ = timed_steps(timed_run, a.reps, a.serve, warmup=lambda: run(min(8, a.new_tokens)))
        med = statistics.median(times)
        results[str(B)] = {"seconds": times, "median_seconds": med, "tokens_per_second": B * a.new_tokens / med}

    print(json.dumps({
        "batches": results,
        "peak_rss_bytes": peak_rss_bytes(),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "threads": a.threads,
        "config": vars(a),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
