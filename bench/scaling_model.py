#!/usr/bin/env python3
"""Ring all-reduce cost model for qkv's data-parallel training (docs/scaling.md prints its output).

Per step every rank all-reduces the float32 gradients: N = 4 * parameters bytes, cut into buckets
of B bytes (qkv's default 25 MiB). A ring all-reduce of one bucket of b bytes over P ranks takes
2 (P - 1) messages in sequence (reduce-scatter, then all-gather), each of b / P bytes:

    t(b) = 2 (P - 1) * (alpha + b / (P * beta))

alpha = per-message latency, beta = link bandwidth in bytes/s (each rank sends and receives
2 (P - 1) / P * N bytes per step). The step time is the compute of one rank's share plus the
part of the all-reduce that backward does not hide:

    no overlap:    T = C + sum_buckets t(b)
    full overlap:  T = max(C, C_fwd + sum_buckets t(b))   (buckets run while backward computes; the
                                                         forward pass, ~1/3 of C, never overlaps)

Usage: bench/scaling_model.py [--compute SECONDS] [--params N ...] [--alpha US]
Standard library only.
"""
import argparse

MODELS = {  # name: parameters (float32 gradients all-reduced per step)
    "Bible translation model (d 256, 4+4 layers, 8k+8k vocab)": 13_524_800,
    "seed 000 (d 512, 6+6 layers, 5k+5k vocab)": 51_823_496,
    "GPT-2 small (124M, tied)": 124_439_808,
}


def ring_seconds(nbytes, ranks, gbit, alpha, bucket):
    if ranks == 1:
        return 0.0
    beta = gbit * 1e9 / 8
    total, left = 0.0, nbytes
    while left > 0:
        b = min(bucket, left)
        total += 2 * (ranks - 1) * (alpha + b / (ranks * beta))
        left -= b
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compute", type=float, default=None,
                    help="seconds of forward+backward+update per step for one rank's share (default: per model below)")
    ap.add_argument("--alpha", type=float, default=20.0, help="per-message latency in microseconds (default 20)")
    ap.add_argument("--bucket-mib", type=float, default=25.0)
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8, 16, 32, 64])
    ap.add_argument("--gbit", type=float, nargs="*", default=[10, 25, 100])
    args = ap.parse_args()
    # Compute per step of one rank measured on this project's machine (1 thread, AMD EPYC core):
    # the Bible model at 3000 tokens a rank (bench/bench_mpi_train.sh); the others scaled by
    # 6 * parameters * tokens FLOPs at the same rate.
    compute = {}
    base_params, base_seconds = 13_524_800, args.compute or 1.0
    for name, params in MODELS.items():
        compute[name] = base_seconds * params / base_params
    for name, params in MODELS.items():
        n = 4 * params
        c = compute[name]
        print(f"\n{name}: {n / 2**20:.1f} MiB all-reduced per step, compute {c:.2f} s per step and rank\n")
        print("| ranks | " + " | ".join(f"{g:g} Gb/s: all-reduce / step (no overlap) / step (overlap)" for g in args.gbit) + " |")
        print("| --- | " + " | ".join("---" for _ in args.gbit) + " |")
        for p in args.ranks:
            cells = []
            for g in args.gbit:
                t = ring_seconds(n, p, g, args.alpha * 1e-6, args.bucket_mib * 2**20)
                cells.append(f"{t:.3f} s / {c + t:.2f} s / {max(c, c / 3 + t):.2f} s")
            print(f"| {p} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
