#!/usr/bin/env python3
"""Runs the README's quickstart blocks as written, on tiny stand-in files, so that they cannot drift.

Usage: run_quickstart.py --qkv BUILD/qkv --readme README.md --hf-marian DIR [--work DIR] [--only NAME]

A quickstart block is a ```bash block right after a `<!-- quickstart: NAME -->` line. Each block
runs with bash (`set -euo pipefail`) in one work directory, in README order (later blocks use the
checkpoints earlier ones trained), with:
  - `build/qkv` a wrapper around the real binary that makes training short: `qkv train` gets
    `--steps 2` and, unless it starts from a checkpoint (--init, --resume), `--spm-vocab 360`;
    `qkv serve` takes a free port where the block says 8080 (the block's URLs are given it too);
  - the files the blocks name, made here: parallel text (train/dev/test .es and .en), raw text
    (corpus.txt, dev.txt), labelled lines (train.tsv, dev.tsv), texts.txt, and opus-mt-es-en/, a
    link to the small Marian model of the reference data (--hf-marian);
  - QKV_THREADS=1 and MPLBACKEND=Agg.
Prints one line per block and its time; exit status 1 when a block fails (its output is shown).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

WORDS = ["the", "light", "was", "good", "and", "God", "divided", "waters", "from", "earth", "heaven", "day",
         "night", "said", "let", "there", "be", "made", "called", "morning"]
SPANISH = {"the": "la", "light": "luz", "was": "era", "good": "buena", "and": "y", "God": "Dios",
           "divided": "separó", "waters": "aguas", "from": "de", "earth": "tierra", "heaven": "cielo", "day": "día",
           "night": "noche", "said": "dijo", "let": "sea", "there": "allí", "be": "ser", "made": "hizo",
           "called": "llamó", "morning": "mañana"}
BLOCK = re.compile(r"^<!-- quickstart: ([\w-]+) -->\n```bash\n(.*?)^```", re.M | re.S)

WRAPPER = """#!/usr/bin/env bash
# The quickstart's build/qkv: the real qkv, with training cut short (tests/docs/run_quickstart.py).
real={real}
case "$1" in
  train)
    extra=(--steps 2)
    case " $* " in *" --init "*|*" --resume "*) ;; *) extra+=(--spm-vocab 360) ;; esac
    exec "$real" "$@" "${{extra[@]}}" ;;
  serve)
    args=()
    for a in "$@"; do [ "$a" = 8080 ] && a={port}; args+=("$a"); done
    exec "$real" "${{args[@]}}" ;;
  *) exec "$real" "$@" ;;
esac
"""

# Used when the machine has no curl: what the serve block asks of it (-s, --retry N,
# --retry-connrefused, -d DATA, one URL).
CURL = """#!/usr/bin/env python3
import sys, time, urllib.request
args, data, url, retries = sys.argv[1:], None, None, 0
i = 0
while i < len(args):
    a = args[i]
    if a == "-d": data = args[i + 1].encode(); i += 1
    elif a == "--retry": retries = int(args[i + 1]); i += 1
    elif not a.startswith("-"): url = a if "://" in a else "http://" + a
    i += 1
for attempt in range(retries + 1):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as r:
            sys.stdout.write(r.read().decode()); sys.exit(0)
    except urllib.error.URLError as e:
        if attempt == retries or not isinstance(e.reason, ConnectionRefusedError): print(e, file=sys.stderr); sys.exit(7)
        time.sleep(2 ** min(attempt, 3))
"""


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + f" number {rng.randint(0, 999)} ."
            for _ in range(n)]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def make_stand_ins(work: Path, hf_marian: Path) -> None:
    """The files the quickstart names, small enough to train on in seconds."""
    for name, n, seed in (("train", 300, 1), ("dev", 12, 2), ("test", 8, 3)):
        en = sentences(n, seed)
        write_lines(work / f"{name}.en", en)
        write_lines(work / f"{name}.es", [" ".join(SPANISH.get(w, w) for w in s.split()) for s in en])
    write_lines(work / "corpus.txt", sentences(300, 4))
    write_lines(work / "dev.txt", sentences(12, 5))
    for name, n, seed in (("train", 120, 6), ("dev", 12, 7)):
        write_lines(work / f"{name}.tsv", [("day" if "day" in s else "night") + "\t" + s for s in sentences(n, seed)])
    write_lines(work / "texts.txt", sentences(5, 8))
    (work / "opus-mt-es-en").symlink_to(hf_marian.resolve(), target_is_directory=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_block(name: str, code: str, work: Path, env: dict[str, str], port: int) -> bool:
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + code.replace(
        "localhost:8080", f"localhost:{port}")
    start = time.monotonic()
    r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    if r.returncode != 0:
        print(f"quickstart {name}: FAILED (exit {r.returncode}, {seconds:.1f} s)\n--- block:\n{code}"
              f"--- stdout:\n{r.stdout}--- stderr:\n{r.stderr}")
        return False
    print(f"quickstart {name}: ok ({seconds:.1f} s)")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--readme", required=True)
    ap.add_argument("--hf-marian", required=True, help="a small Marian directory (the reference data's hf_marian)")
    ap.add_argument("--work", help="work directory (default: a fresh one under /tmp)")
    ap.add_argument("--only", help="run the blocks up to and including this one")
    a = ap.parse_args()
    blocks = BLOCK.findall(Path(a.readme).read_text(encoding="utf-8"))
    expected = ["translate", "gpt", "bert", "import", "serve"]
    if [name for name, _ in blocks] != expected:
        print(f"README quickstart blocks: {[n for n, _ in blocks]}, expected {expected}")
        return 1
    work = Path(a.work) if a.work else Path(f"/tmp/qkv-quickstart-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    (work / "build").mkdir(parents=True)
    make_stand_ins(work, Path(a.hf_marian))
    port = free_port()
    wrapper = work / "build" / "qkv"
    wrapper.write_text(WRAPPER.format(real=str(Path(a.qkv).resolve()), port=port))
    wrapper.chmod(0o755)
    env = dict(os.environ, QKV_THREADS="1", MPLBACKEND="Agg")
    if not shutil.which("curl"):
        (work / "bin").mkdir()
        (work / "bin" / "curl").write_text(CURL)
        (work / "bin" / "curl").chmod(0o755)
        env["PATH"] = f"{work / 'bin'}:{env['PATH']}"
    ok = True
    for name, code in blocks:
        ok = run_block(name, code, work, env, port) and ok
        if not ok or name == a.only:
            break
    if ok and not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
