"""Train a small GPT-style language model from Python, watch it learn, generate from it, and draw
its training curves.

    PYTHONPATH=build/python python3 examples/train_and_generate.py --text corpus.txt --output-dir runs/lm

Without --text, a small text is made up here so the example runs anywhere in under a minute.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import qkv


def made_up_text(path: Path) -> None:
    words = "in the beginning God created the heaven and the earth and the earth was without form".split()
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(400):
            start = rng.randrange(len(words) - 6)
            f.write(" ".join(words[start:start + rng.randint(4, 8)]) + f" , day {rng.randint(1, 999)} .\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", help="training text, one sentence a line (default: made up)")
    parser.add_argument("--output-dir", "--out", dest="output_dir", default="runs/example-lm", help="run directory (--out: the older name)")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = Path(args.text) if args.text else out / "text.txt"
    if not args.text:
        made_up_text(text)

    trainer = qkv.Trainer(arch="decoder-only", text=str(text), valid_text=str(text), output_dir=str(out),
                          steps=args.steps, valid_every=50, log_every=10, spm_vocab=320, block_size=32, batch_size=8,
                          d_model=32, heads=2, layers=2, d_ff=64, lr=3e-3, warmup=20)

    def show(m: dict) -> None:
        if m["event"] == "step":
            print(f"step {m['step']:4d}  loss {m['loss']:.3f}  lr {m['lr']:.1e}  {m['tokens_per_second']:.0f} tok/s")
        else:
            print(f"  validation: loss {m['loss']:.3f}  perplexity {m['perplexity']:.2f}{'  (best)' if m['best'] else ''}")

    result = trainer.fit(callback=show)
    print(f"{result['stop_reason']} at step {result['step']}; saved {result['last_checkpoint']}")

    generator = qkv.Generator(result["last_checkpoint"])
    print("greedy:  ", generator.generate("in the beginning", max_new_tokens=12))
    print("streamed:", end=" ", flush=True)
    for piece in generator.generate("the earth", max_new_tokens=12, do_sample=True, seed=1, stream=True):
        print(piece, end="", flush=True)
    print()

    try:
        figure = qkv.plot.curves(str(out), out=str(out / "curves.png"))
        print(f"curves: {out / 'curves.png'} ({len(figure.axes)} panels)")
    except ImportError as e:  # matplotlib is optional
        print(f"no curves: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
