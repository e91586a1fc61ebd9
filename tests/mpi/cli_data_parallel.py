#!/usr/bin/env python3
"""`mpirun -np 2 qkv train` against one process (CTest: mpi.cli_data_parallel).

1. Exactness: 10 steps with 2 ranks (1 thread each) give model.safetensors and
   optimizer.safetensors byte-identical to one process with 1 thread and --micro-batch equal to
   each rank's share: an encoder-decoder model (seed 000's architecture, synthetic ids, dropout
   on) and a decoder-only language model trained on text (vocabulary built by rank 0).
2. A rank that cannot read its data (MPMD: rank 1 gets a missing file) stops both ranks with a
   message naming rank 1, exit status 1.
3. A rank that hangs (SIGSTOP) makes the other stop within --dist-timeout plus the probe window,
   naming it; the last checkpoint is intact (`qkv info` loads it).

Usage: cli_data_parallel.py --qkv build/qkv --mpirun /usr/bin/mpirun
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--mpirun", required=True)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", QKV_THREADS="1")
    mpirun = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS", "-x", "QKV_THREADS"]
    tmp = tempfile.mkdtemp(prefix="qkv_mpi_cli_")
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            failures.append(what)

    # 1a. encoder-decoder on synthetic ids: 8 rows, 4 a rank.
    seed = [args.qkv, "train", "--synthetic", "--preset", "seed", "--task", "copy", "--vocab", "40", "--d-model", "32",
            "--heads", "4", "--layers", "2", "--d-ff", "64", "--batch", "8", "--len", "12", "--dropout", "0.1",
            "--steps", "10", "--lr", "1e-3", "--clip-norm", "1.0", "--threads", "1", "--log-every", "5"]
    r2 = run(mpirun + ["-np", "2"] + seed + ["--out", f"{tmp}/s2", "--allreduce-bucket-mb", "0.01"], env=env)
    r1 = run(seed + ["--out", f"{tmp}/s1", "--micro-batch", "4"], env=env)
    check(r2.returncode == 0 and r1.returncode == 0, f"synthetic runs finish ({r2.stderr[-400:]}{r1.stderr[-400:]})")
    for f in ("model.safetensors", "optimizer.safetensors"):
        check(r2.returncode == 0 and same(f"{tmp}/s2/{f}", f"{tmp}/s1/{f}"), f"encoder-decoder: {f} of 2 ranks == 1 process --micro-batch 4")
    check("data parallel: MPI: 2 ranks" in r2.stderr and "all-reduce:" in r2.stderr, "rank 0 reports the ranks and the all-reduce")

    # 1b. decoder-only language model on text (SentencePiece trained by rank 0): 6 blocks, 3 a rank.
    words = ["in", "the", "beginning", "was", "word", "and", "light", "darkness", "god", "said", "let", "there", "be"]
    with open(f"{tmp}/text.txt", "w") as f:
        for i in range(400):
            f.write(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(5 + i % 9)) + f" number {i}.\n")
    lm = [args.qkv, "train", "--arch", "decoder-only", "--text", f"{tmp}/text.txt", "--spm-vocab", "300",
          "--block-size", "16", "--batch", "6", "--d-model", "32", "--heads", "4", "--layers", "2", "--d-ff", "64",
          "--dropout", "0.1", "--steps", "10", "--warmup", "3", "--lr", "3e-3", "--valid-every", "5", "--threads", "1",
          "--log-every", "5"]
    r2 = run(mpirun + ["-np", "2"] + lm + ["--out", f"{tmp}/l2"], env=env)
    r1 = run(lm + ["--out", f"{tmp}/l1", "--micro-batch", "3"], env=env)
    check(r2.returncode == 0 and r1.returncode == 0, f"language-model runs finish ({r2.stderr[-400:]}{r1.stderr[-400:]})")
    for f in ("spm.model", "last/model.safetensors", "last/optimizer.safetensors"):
        check(r2.returncode == 0 and same(f"{tmp}/l2/{f}", f"{tmp}/l1/{f}"), f"decoder-only: {f} of 2 ranks == 1 process --micro-batch 3")

    # 2. rank 1 cannot read its data.
    bad = [a if a != f"{tmp}/text.txt" else f"{tmp}/missing.txt" for a in lm]
    r = run(mpirun + ["-np", "1"] + lm + ["--out", f"{tmp}/bad", ":", "-np", "1"] + bad + ["--out", f"{tmp}/bad"],
            env=env, timeout=120)
    check(r.returncode == 1 and "rank 1:" in r.stderr and "missing.txt" in r.stderr,
          f"a rank that cannot read its data stops both, named (exit {r.returncode}: {r.stderr.strip()[-300:]})")

    # 3. rank 1 hangs after a few steps: rank 0 stops within the timeout naming it.
    hang = seed[:]
    hang[hang.index("--steps") + 1] = "100000"
    p = subprocess.Popen(mpirun + ["-np", "2"] + hang + ["--out", f"{tmp}/h", "--save-every", "2", "--dist-timeout", "3"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    rank1 = None
    deadline = time.time() + 60
    while time.time() < deadline and rank1 is None:
        time.sleep(0.5)
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    e = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"OMPI_COMM_WORLD_RANK=1" in e and f"{tmp}/h".encode() in cmd:
                rank1 = int(pid)
    if rank1 is not None:
        while not os.path.exists(f"{tmp}/h/manifest.json") and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        os.kill(rank1, signal.SIGSTOP)
        stopped = time.time()
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
        took = time.time() - stopped
        try:
            os.kill(rank1, signal.SIGKILL)
        except OSError:
            pass
        check(p.returncode != 0 and "rank 1 did not answer" in err and took < 30,
              f"a hung rank is named within the timeout ({took:.1f} s, exit {p.returncode}: {err.strip()[-300:]})")
        info = run([args.qkv, "info", f"{tmp}/h"])
        check(info.returncode == 0, f"the last checkpoint is intact ({info.stderr.strip()})")
    else:
        os.killpg(p.pid, signal.SIGKILL)
        check(False, "found rank 1's process")

    shutil.rmtree(tmp, ignore_errors=True)
    print("ok all" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
