#!/usr/bin/env python3
"""Runs every command of the qkv binary with --quiet: on success, nothing on stderr.

Usage: check_quiet.py --qkv BUILD/qkv [--work DIR]

docs/cli.md: `--quiet` on every command silences progress, summary, log and note lines, never
errors. This trains three tiny models (a translator, a language model, a classifier) on made-up
text, then runs each command `qkv --help` lists on them with --quiet (a command without a run in
RUNS fails the check), and expects exit status 0 and an empty stderr. Also: a deprecated flag's
note is silenced too; the same translate run without --quiet does print (so the check means
something); an error still prints under --quiet; `qkv serve --quiet` serves, stops on SIGTERM and
prints nothing. Prints one line per run; exit status 1 when any run differs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

WORDS = ["the", "light", "was", "good", "and", "God", "divided", "waters", "from", "earth", "heaven", "day",
         "night", "said", "let", "there", "be", "made", "called", "morning"]
TINY = ["--preset", "tiny", "--steps", "2", "--spm-vocab", "360", "--threads", "1"]

# What each command runs with --quiet (in this order: later runs use what earlier ones wrote);
# "<" FILE: the file is the command's stdin.
RUNS: list[tuple[str, list[str]]] = [
    ("train", ["--src", "train.es", "--tgt", "train.en", "--valid-src", "dev.es", "--valid-tgt", "dev.en",
               "--output-dir", "runs/mt", *TINY]),
    ("train", ["--arch", "decoder-only", "--text", "corpus.txt", "--valid-text", "dev.txt", "--output-dir", "runs/lm",
               *TINY]),
    ("train", ["--arch", "encoder-only", "--objective", "classify", "--labelled", "train.tsv", "--valid-labelled",
               "dev.tsv", "--output-dir", "runs/clf", *TINY]),
    ("init", ["--config", "runs/mt/best/config.json", "--output-dir", "init"]),
    ("translate", ["--checkpoint", "runs/mt/best", "--input", "test.es", "-o", "test.out"]),
    ("generate", ["--checkpoint", "runs/lm/best", "--prompt", "the light", "--max-new-tokens", "3"]),
    ("score", ["--checkpoint", "runs/lm/best", "--text", "dev.txt"]),
    ("bleu", ["test.en", "<", "test.out"]),
    ("chrf", ["test.en", "<", "test.out"]),
    ("average", ["--checkpoint", "runs/mt/last", "--checkpoint", "runs/mt/best", "--output-dir", "averaged"]),
    ("info", ["--checkpoint", "runs/mt/best"]),
    ("export", ["--to", "hf", "--checkpoint", "runs/lm/best", "--output-dir", "hf-lm"]),  # it has notes to say
    ("import", ["--from", "hf", "hf-lm", "--output-dir", "imported"]),
    ("embed", ["--checkpoint", "runs/clf/best", "--input", "texts.txt", "-o", "vectors.npy"]),
    ("similar", ["--checkpoint", "runs/clf/best", "--corpus", "texts.txt", "--query", "the light"]),
    ("classify", ["--checkpoint", "runs/clf/best", "--input", "texts.txt"]),
    ("tokenize", ["--checkpoint", "runs/lm/best", "--input", "texts.txt"]),
    ("plot", ["runs/clf", "-o", "clf.png"]),
    ("translate", ["--checkpoint", "runs/mt/best", "--input", "test.es", "--beam", "2"]),  # a deprecated flag's note
]


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + f" number {rng.randint(0, 999)} ."
            for _ in range(n)]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def make_inputs(work: Path) -> None:
    for name, n, seed in (("train", 300, 1), ("dev", 8, 2), ("test", 6, 3)):
        en = sentences(n, seed)
        write_lines(work / f"{name}.en", en)
        write_lines(work / f"{name}.es", [" ".join(reversed(s.split())) for s in en])
    write_lines(work / "corpus.txt", sentences(300, 4))
    write_lines(work / "dev.txt", sentences(8, 5))
    for name, n, seed in (("train", 300, 6), ("dev", 8, 7)):
        write_lines(work / f"{name}.tsv", [("day" if "day" in s else "night") + "\t" + s for s in sentences(n, seed)])
    write_lines(work / "texts.txt", sentences(5, 8))


def run(qkv: str, args: list[str], work: Path) -> subprocess.CompletedProcess:
    stdin = subprocess.DEVNULL
    if "<" in args:
        at = args.index("<")
        stdin = open(work / args[at + 1], "rb")  # noqa: SIM115 (closed below)
        args = args[:at] + args[at + 2:]
    try:
        return subprocess.run([qkv, *args], cwd=work, capture_output=True, text=True, stdin=stdin, timeout=300,
                              env=dict(os.environ, QKV_THREADS="1", MPLBACKEND="Agg"))
    finally:
        if stdin is not subprocess.DEVNULL:
            stdin.close()


def commands(qkv: str) -> list[str]:
    text = subprocess.run([qkv, "--help"], capture_output=True, text=True).stdout
    return [m.group(1) for m in re.finditer(r"^\s+([a-z]+)\s", text.split("Subcommands:", 1)[1], re.M)]


def quiet_serve(qkv: str, work: Path) -> str | None:
    """`qkv serve --quiet`: answers, stops on SIGTERM with status 0; what went wrong, or None."""
    port_file = work / "serve.port"
    p = subprocess.Popen([qkv, "serve", "--model", "lm=runs/lm/best", "--port", "0", "--port-file", str(port_file),
                          "--threads", "1", "--quiet"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            try:
                port = int(port_file.read_text())
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (OSError, ValueError, urllib.error.URLError):
                time.sleep(0.2)
        else:
            return f"did not get ready (exit {p.poll()})"
        body = json.dumps({"model": "lm", "prompt": "the light", "max_tokens": 2}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body),
                                    timeout=60) as r:
            json.loads(r.read())
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0:
        return f"exit {p.returncode}: {err[-300:]!r}"
    return f"stderr {err[-300:]!r}" if err else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--work", help="work directory (default: a fresh one under /tmp, removed at the end)")
    a = ap.parse_args()
    qkv = str(Path(a.qkv).resolve())
    work = Path(a.work) if a.work else Path(f"/tmp/qkv-quiet-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    make_inputs(work)
    problems: list[str] = []
    ran = {command for command, _ in RUNS} | {"serve"}
    problems += [f"qkv {c}: no --quiet run in check_quiet.py" for c in commands(qkv) if c not in ran]
    for command, args in RUNS:
        start = time.monotonic()
        r = run(qkv, [command, *args, "--quiet"], work)
        what = f"qkv {command} {' '.join(args)} --quiet"
        if r.returncode != 0:
            problems.append(f"{what}: exit {r.returncode}: {r.stderr[-400:]!r}")
        elif r.stderr:
            problems.append(f"{what}: stderr not empty: {r.stderr[-400:]!r}")
        print(f"{what}: {'ok' if r.returncode == 0 and not r.stderr else 'FAILED'} ({time.monotonic() - start:.1f} s)")
    # Without --quiet the same runs do print: the check above is not vacuous.
    for command, args, expected in (("translate", ["--checkpoint", "runs/mt/best", "--input", "test.es", "--beam", "2"],
                                     "qkv: note: --beam is deprecated; use --beam-size"),
                                    ("export", ["--to", "hf", "--checkpoint", "runs/lm/best", "--output-dir", "hf-lm2"],
                                     "qkv: note: ")):
        r = run(qkv, [command, *args], work)
        if r.returncode != 0 or expected not in r.stderr:
            problems.append(f"qkv {command} {' '.join(args)} (not quiet): expected {expected!r} on stderr, got "
                            f"{r.stderr[-300:]!r}")
    # Errors are never silenced.
    r = run(qkv, ["info", "--checkpoint", "/nonexistent-qkv-path", "--quiet"], work)
    if r.returncode != 1 or not r.stderr.startswith("qkv: error: "):
        problems.append(f"qkv info --checkpoint /nonexistent-qkv-path --quiet: exit {r.returncode}, {r.stderr!r}")
    if "Serve models over HTTP (not in this build" in subprocess.run([qkv, "--help"], capture_output=True,
                                                                     text=True).stdout:
        print("qkv serve --quiet: skipped (built without cpp-httplib)")
    else:
        failure = quiet_serve(qkv, work)
        print(f"qkv serve --quiet: {'ok' if failure is None else 'FAILED'}")
        if failure:
            problems.append(f"qkv serve --quiet: {failure}")
    for p in problems:
        print(p)
    print(f"{len(RUNS) + 4} runs checked; {len(problems)} problem(s)")
    if not problems and not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
