#!/usr/bin/env python3
"""OpenBLAS, BLIS, oneDNN and PyTorch's MKL on qkv's training GEMM shapes, side by side (issue 11).

Builds bench/blas_shapes.cpp once per library this machine has (Debian's libopenblas-openmp-dev,
libblis-dev with libblis4-openmp, libdnnl-dev), runs them in interleaved rounds with the same
thread count, adds PyTorch 2.x (MKL) from build/bench-venv when present, and prints each shape's
median GFLOP/s over the rounds and its ratio to OpenBLAS (qkv's BLAS). "all" is total FLOPs over
total time, the figure a training step feels.

Usage: bench/compare_blas.py [--threads 2] [--rounds 3] [--reps 5] [--only SUBSTRING] [--work DIR]
(--only: the shapes whose name contains it, e.g. minilm for a quick check, as CTest's bench.compare_blas;
--work: where the programs are built, default build/bench)
Installs nothing: apt-get install libblis-dev libblis4-openmp libdnnl-dev for the other columns.
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "bench", "blas_shapes.cpp")
LIB = "/usr/lib/x86_64-linux-gnu"
INC = "/usr/include/x86_64-linux-gnu"

# name -> (compiler arguments after the source, the file that must exist)
LIBRARIES = {
    "OpenBLAS": (["-DUSE_CBLAS", f"-I{INC}/openblas-openmp", f"-L{LIB}/openblas-openmp", "-lopenblas",
                  f"-Wl,-rpath,{LIB}/openblas-openmp"], f"{LIB}/openblas-openmp/libopenblas.so"),
    "BLIS": (["-DUSE_CBLAS", f"-I{INC}/blis-openmp", f"-L{LIB}/blis-openmp", "-lblis",
              f"-Wl,-rpath,{LIB}/blis-openmp"], f"{LIB}/blis-openmp/libblis.so"),
    "oneDNN": (["-DUSE_DNNL", "-ldnnl"], f"{LIB}/libdnnl.so"),
}

TORCH_RUNNER = r"""
import sys, time, torch
torch.set_num_threads(int(sys.argv[1])); reps = int(sys.argv[2])
for line in sys.stdin:
    name, M, N, K, ta, tb = line.rstrip("\n").split("\t"); M, N, K = int(M), int(N), int(K)
    a = torch.rand((K, M) if ta == "1" else (M, K)); b = torch.rand((N, K) if tb == "1" else (K, N))
    A = a.t() if ta == "1" else a; B = b.t() if tb == "1" else b
    ts = []
    for r in range(reps + 1):
        t0 = time.perf_counter(); torch.mm(A, B); d = time.perf_counter() - t0
        if r: ts.append(d)
    ts.sort(); print(f"{name}\t{2 * M * N * K / ts[len(ts) // 2] * 1e-9:.1f}", flush=True)
"""


def build(out_dir):
    binaries = {}
    for name, (args, needed) in LIBRARIES.items():
        if not os.path.exists(needed):
            print(f"{name}: {needed} not found, skipped", file=sys.stderr)
            continue
        exe = os.path.join(out_dir, "blas_shapes_" + name.lower())
        r = subprocess.run(["g++", "-O2", "-std=c++17", SOURCE, "-o", exe] + args, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name}: build failed, skipped:\n{r.stderr[-1500:]}", file=sys.stderr)
            continue
        binaries[name] = exe
    return binaries


def parse(text):
    return {name: float(g) for name, g in (line.split("\t") for line in text.strip().splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="only the shapes whose name contains this")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench"), help="where the programs are built")
    a = ap.parse_args()
    if a.threads < 1 or a.rounds < 1 or a.reps < 1:
        ap.error("need --threads, --rounds, --reps >= 1")
    out_dir = a.work
    os.makedirs(out_dir, exist_ok=True)
    binaries = build(out_dir)
    if "OpenBLAS" not in binaries:
        sys.exit("OpenBLAS (libopenblas-openmp-dev, qkv's BLAS) is needed as the reference column")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), BLIS_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS=str(a.threads))
    only = ["--only", a.only]
    listed = subprocess.run([binaries["OpenBLAS"], "--list"] + only, capture_output=True, text=True)
    if listed.returncode != 0:
        sys.exit(listed.stderr.strip() or f"blas_shapes --list failed ({listed.returncode})")
    shapes = listed.stdout
    names = [line.split("\t")[0] for line in shapes.strip().splitlines()]
    flops = {line.split("\t")[0]: 2.0 * int(line.split("\t")[1]) * int(line.split("\t")[2]) * int(line.split("\t")[3])
             for line in shapes.strip().splitlines()}
    venv = os.path.join(ROOT, "build", "bench-venv", "bin", "python")
    with_torch = os.path.exists(venv) and subprocess.run([venv, "-c", "import torch"], capture_output=True).returncode == 0
    if os.path.exists(venv) and not with_torch:
        print(f"PyTorch: {venv} has no torch (bench/setup_peers.sh installs it), skipped", file=sys.stderr)
    results = {name: [] for name in list(binaries) + (["PyTorch (MKL)"] if with_torch else [])}
    for rnd in range(a.rounds):
        for name, exe in binaries.items():
            results[name].append(parse(subprocess.run([exe, "--reps", str(a.reps)] + only, env=env,
                                                      capture_output=True, text=True, check=True).stdout))
        if with_torch:
            r = subprocess.run([venv, "-c", TORCH_RUNNER, str(a.threads), str(a.reps)], input=shapes, env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"PyTorch runner failed:\n{r.stderr[-1500:]}")
            results["PyTorch (MKL)"].append(parse(r.stdout))
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    columns = list(results)
    median = {c: {n: statistics.median(run[n] for run in results[c]) for n in names} for c in columns}
    for c in columns:  # total FLOPs over total time, per round, then the median over rounds
        median[c]["all"] = statistics.median(sum(flops.values()) / sum(flops[n] / run[n] for n in names)
                                             for run in results[c])
    print(f"GFLOP/s, {a.threads} threads, median of {a.rounds} rounds x median of {a.reps} calls "
          f"(ratio to OpenBLAS in brackets)")
    print(f"{'shape':38}" + "".join(f"{c:>22}" for c in columns))
    for n in names + ["all"]:
        base = median["OpenBLAS"][n]
        print(f"{n:38}" + "".join(f"{median[c][n]:>13.1f} ({median[c][n] / base:4.2f}x)" for c in columns))


if __name__ == "__main__":
    main()
