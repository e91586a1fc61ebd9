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
4. kill -9 of rank 1: mpirun ends the job naming rank 1; the last checkpoint is whole, and one
   process resuming it (a different number of ranks) ends byte-identical to an uninterrupted run.
5. SIGINT to mpirun (Ctrl-C): every rank stops at the same step, rank 0 saves it, and 2 ranks
   resuming it end byte-identical to the uninterrupted run.
6. 3 ranks: the order of a sum of three gradients is the MPI library's, so the weights after 10
   steps equal one process's within the bound docs/scaling.md states (relative 1e-5 of the largest
   weight; they differ by float rounding only).

Usage: cli_data_parallel.py --qkv build/qkv --mpirun /usr/bin/mpirun
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import struct
import sys
import tempfile
import time


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def float_tensors(path):
    """{name: list of floats} of a safetensors file's F32 tensors."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", data[8 + n + a:8 + n + b])
    return out


def rank_pid(rank, marker, deadline):
    """The pid of MPI rank `rank` of the job whose command line contains `marker`, or None."""
    while time.time() < deadline:
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    e = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in e and marker.encode() in cmd:
                return int(pid)
        time.sleep(0.2)
    return None


def stderr_within(p, seconds):
    """The job's stderr once it ends; past `seconds` its whole process group is killed first."""
    try:
        return p.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return p.communicate()[1]


def first_step_lines(p, deadline):
    """The job's stderr up to and including its first progress line ("step N/M ..."), read as it comes."""
    seen = ""
    while time.time() < deadline:
        line = p.stderr.readline()
        seen += line
        if not line or line.startswith("step "):
            break
    return seen


def wait_for(path, deadline):
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.1)
    return os.path.exists(path)


def manifest_step(ckpt):
    with open(f"{ckpt}/manifest.json") as f:
        return json.load(f)["step"]


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
            "--heads", "4", "--layers", "2", "--d-ff", "64", "--batch-size", "8", "--len", "12", "--dropout", "0.1",
            "--steps", "10", "--lr", "1e-3", "--clip-norm", "1.0", "--threads", "1", "--log-every", "5"]
    r2 = run(mpirun + ["-np", "2"] + seed + ["--output-dir", f"{tmp}/s2", "--allreduce-bucket-mb", "0.01"], env=env)
    r1 = run(seed + ["--output-dir", f"{tmp}/s1", "--micro-batch", "4"], env=env)
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
          "--block-size", "16", "--batch-size", "6", "--d-model", "32", "--heads", "4", "--layers", "2", "--d-ff", "64",
          "--dropout", "0.1", "--steps", "10", "--warmup", "3", "--lr", "3e-3", "--valid-every", "5", "--threads", "1",
          "--log-every", "5"]
    r2 = run(mpirun + ["-np", "2"] + lm + ["--output-dir", f"{tmp}/l2"], env=env)
    r1 = run(lm + ["--output-dir", f"{tmp}/l1", "--micro-batch", "3"], env=env)
    check(r2.returncode == 0 and r1.returncode == 0, f"language-model runs finish ({r2.stderr[-400:]}{r1.stderr[-400:]})")
    for f in ("spm.model", "last/model.safetensors", "last/optimizer.safetensors"):
        check(r2.returncode == 0 and same(f"{tmp}/l2/{f}", f"{tmp}/l1/{f}"), f"decoder-only: {f} of 2 ranks == 1 process --micro-batch 3")

    # 2. rank 1 cannot read its data.
    bad = [a if a != f"{tmp}/text.txt" else f"{tmp}/missing.txt" for a in lm]
    r = run(mpirun + ["-np", "1"] + lm + ["--output-dir", f"{tmp}/bad", ":", "-np", "1"] + bad + ["--output-dir", f"{tmp}/bad"],
            env=env, timeout=120)
    check(r.returncode == 1 and "rank 1:" in r.stderr and "missing.txt" in r.stderr,
          f"a rank that cannot read its data stops both, named (exit {r.returncode}: {r.stderr.strip()[-300:]})")

    # 3. rank 1 hangs after a few steps: rank 0 stops within the timeout naming it.
    hang = seed[:]
    hang[hang.index("--steps") + 1] = "100000"
    p = subprocess.Popen(mpirun + ["-np", "2"] + hang + ["--output-dir", f"{tmp}/h", "--save-every", "2", "--dist-timeout", "3"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    rank1 = rank_pid(1, f"{tmp}/h", deadline)
    if rank1 is not None:
        while not os.path.exists(f"{tmp}/h/manifest.json") and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        os.kill(rank1, signal.SIGSTOP)
        stopped = time.time()
        err = stderr_within(p, 60)
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

    # 4. kill -9 of rank 1 in a run saving every 2 steps; one process resumes the checkpoint.
    long = seed[:]
    long_steps = 5000  # 2 ranks take about 3 s on a fast machine: time for the signals below to land
    long[long.index("--steps") + 1] = str(long_steps)
    ref = run(long + ["--output-dir", f"{tmp}/ref", "--micro-batch", "4"], env=env)
    check(ref.returncode == 0, f"the uninterrupted {long_steps}-step reference finishes ({ref.stderr[-300:]})")
    p = subprocess.Popen(mpirun + ["-np", "2"] + long + ["--output-dir", f"{tmp}/k", "--save-every", "2"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    rank1 = rank_pid(1, f"{tmp}/k", deadline)
    if rank1 is not None and wait_for(f"{tmp}/k/manifest.json", deadline):
        time.sleep(0.3)
        os.kill(rank1, signal.SIGKILL)
        killed = time.time()
        err = stderr_within(p, 60)
        took = time.time() - killed
        check(p.returncode != 0 and "rank 1" in err and took < 30,
              f"kill -9 of rank 1 ends the job within 30 s, naming rank 1 ({took:.1f} s, exit {p.returncode}: "
              f"{err.strip()[-300:]})")
        step = manifest_step(f"{tmp}/k")
        check(0 < step < long_steps, f"the run was killed mid-way (checkpoint of step {step})")
        r = run(long + ["--micro-batch", "4", "--resume", f"{tmp}/k"], env=env)
        check(r.returncode == 0, f"one process resumes the killed run ({r.stderr[-300:]})")
        for f in ("model.safetensors", "optimizer.safetensors"):
            check(r.returncode == 0 and same(f"{tmp}/k/{f}", f"{tmp}/ref/{f}"),
                  f"kill -9 at step {step}, resumed by 1 process: {f} == the uninterrupted run")
    else:
        os.killpg(p.pid, signal.SIGKILL)
        check(False, "found rank 1's process and a first checkpoint")

    # 5. SIGINT to mpirun, as Ctrl-C; 2 ranks resume.
    # The signal goes out once rank 0 has logged its first step: a fixed sleep after start-up
    # landed after the end of the run on a fast machine. mpirun forwards it within about a second.
    p = subprocess.Popen(mpirun + ["-np", "2"] + long + ["--output-dir", f"{tmp}/c"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    if rank_pid(1, f"{tmp}/c", deadline) is not None:
        first = first_step_lines(p, deadline)
        p.send_signal(signal.SIGINT)
        err = first + stderr_within(p, 60)
        saved = os.path.exists(f"{tmp}/c/manifest.json")
        step = manifest_step(f"{tmp}/c") if saved else -1
        check(saved and f"interrupted at step {step}" in err and 0 < step < long_steps,
              f"Ctrl-C stops every rank at one step and rank 0 saves it (step {step}: {err.strip()[-300:]})")
        r = run(mpirun + ["-np", "2"] + long + ["--resume", f"{tmp}/c"], env=env)
        check(r.returncode == 0, f"2 ranks resume the interrupted run ({r.stderr[-300:]})")
        for f in ("model.safetensors", "optimizer.safetensors"):
            check(r.returncode == 0 and same(f"{tmp}/c/{f}", f"{tmp}/ref/{f}"),
                  f"Ctrl-C at step {step}, resumed by 2 ranks: {f} == the uninterrupted run")
    else:
        os.killpg(p.pid, signal.SIGKILL)
        check(False, "found rank 1's process (Ctrl-C)")

    # 6. 3 ranks of 4 rows against one process with micro-batches of 4.
    three = seed[:]
    three[three.index("--batch-size") + 1] = "12"
    r3 = run(mpirun + ["-np", "3"] + three + ["--output-dir", f"{tmp}/t3"], env=env)
    r1 = run(three + ["--output-dir", f"{tmp}/t1", "--micro-batch", "4"], env=env)
    check(r3.returncode == 0 and r1.returncode == 0, f"3-rank runs finish ({r3.stderr[-400:]}{r1.stderr[-400:]})")
    if r3.returncode == 0 and r1.returncode == 0:
        a, b = float_tensors(f"{tmp}/t3/model.safetensors"), float_tensors(f"{tmp}/t1/model.safetensors")
        largest = max(abs(v) for t in b.values() for v in t)
        diff = max(abs(x - y) for name in b for x, y in zip(a[name], b[name]))
        check(a.keys() == b.keys() and diff <= 1e-5 * largest,
              f"3 ranks: weights within 1e-5 of the largest ({largest:.3g}) of one process's (max difference {diff:.3g})")

    shutil.rmtree(tmp, ignore_errors=True)
    print("ok all" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
