"""Helpers shared by bench/ct2_exact.py and bench/bench_translate.py: each peer runs in its own child
process, whose wall time and peak RSS (os.wait4's rusage of that child alone) are measured here."""
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))


class Run:
    def __init__(self, wall, maxrss_mb, stdout, stderr):
        self.wall, self.maxrss_mb, self.stdout, self.stderr = wall, maxrss_mb, stdout, stderr


def run_child(cmd, stdout_path=None):
    """Runs cmd to completion (stdout to stdout_path, or captured); a failure stops the benchmark
    with the child's stderr. stderr goes to a file so that a chatty child never blocks on a pipe."""
    import tempfile

    with tempfile.TemporaryFile("w+") as err, open(stdout_path or os.devnull, "w") as out_file:
        start = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out_file if stdout_path else subprocess.PIPE, stderr=err, text=True)
        captured = "" if stdout_path else p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak RSS, not the maximum over all children
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
    return Run(wall, usage.ru_maxrss / 1024.0, captured, stderr)


def qkv_tokenize(qkv, checkpoint, text_path, out_path):
    """The source ids `qkv translate` feeds its encoder: the SentencePiece pieces, no BOS or EOS."""
    spm = os.path.join(checkpoint, "source.spm.model")
    if not os.path.isfile(spm):
        sys.exit(f"{spm}: no such file (the checkpoint's source SentencePiece model)")
    run_child([qkv, "tokenize", "--tokenizer", spm, "--input", text_path, "--no-special-tokens"], out_path)


def peer_python():
    """The Python with ctranslate2 (bench/setup_peers.sh's venv), else this one."""
    venv = os.path.join(ROOT, "build", "bench-venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def convert_once(python, checkpoint, out_dir):
    """Converts CKPT to out_dir unless out_dir holds a conversion of the same model.safetensors."""
    stamp = os.path.join(out_dir, "qkv_source.json")
    src = os.path.join(checkpoint, "model.safetensors")
    if not os.path.isfile(src):
        sys.exit(f"{src}: no such file (a qkv checkpoint directory holds config.json and model.safetensors)")
    key = {"checkpoint": os.path.abspath(checkpoint), "mtime": os.path.getmtime(src), "size": os.path.getsize(src)}
    if os.path.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == key:
                return out_dir
    r = run_child([python, os.path.join(HERE, "ct2_convert.py"), "--checkpoint", checkpoint, "--out", out_dir,
                   "--force"])
    print("  " + r.stderr.strip(), file=sys.stderr)
    with open(stamp, "w") as f:
        json.dump(key, f)
    return out_dir


def qkv_translate_cmd(qkv, checkpoint, ids_path, beam, batch, threads, length_penalty):
    return [qkv, "translate", "--checkpoint", checkpoint, "--input", ids_path, "--ids", "--beam-size", str(beam),
            "--batch-size", str(batch), "--threads", str(threads), "--length-penalty", str(length_penalty)]


def ct2_translate_cmd(python, checkpoint, model, ids_path, out_path, beam, batch, threads, compute_type,
                      length_penalty, cut_to_limit=False):
    cmd = [python, os.path.join(HERE, "ct2_translate.py"), "--checkpoint", checkpoint, "--model", model,
           "--ids", ids_path, "--out", out_path, "--beam", str(beam), "--batch-size", str(batch),
           "--threads", str(threads), "--compute-type", compute_type, "--length-penalty", str(length_penalty)]
    return cmd + (["--cut-to-limit"] if cut_to_limit else [])


def qkv_summary_seconds(stderr):
    """Translation seconds by qkv's own clock (after loading): its 'N output tokens ... T tokens/s'."""
    m = re.search(r"(\d+) output tokens in \S+ \([\d.]+ sentences/s, (\d+) tokens/s\)", stderr)
    return int(m.group(1)) / int(m.group(2)) if m and int(m.group(2)) else float("nan")


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def count_tokens(ids_path):
    return sum(len(line.split()) for line in read_lines(ids_path))


def identical_lines(a_path, b_path):
    a, b = read_lines(a_path), read_lines(b_path)
    if len(a) != len(b):
        sys.exit(f"{a_path} has {len(a)} lines, {b_path} {len(b)}")
    return sum(x == y for x, y in zip(a, b)), len(a)


def sgemm_ceiling(qkv, threads):
    """GFLOP/s of OpenBLAS SGEMM now (the machine's speed moves between runs), or None when the bench
    binary next to the qkv CLI was not built."""
    binary = os.path.join(os.path.dirname(os.path.abspath(qkv)), "bench", "bench_int8_gemm")
    if not os.path.exists(binary):
        return None
    run = subprocess.run([binary, "--sgemm-ceiling", "--threads", str(threads)], capture_output=True, text=True)
    m = re.search(r"sgemm ceiling ([\d.]+) GFLOP/s", run.stdout)
    return float(m.group(1)) if m else None
