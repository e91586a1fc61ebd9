#!/usr/bin/env python3
"""Walks docs/cli.md's exit-code table through every command of the qkv binary.

Usage: check_exit_codes.py --qkv BUILD/qkv --doc docs/cli.md

The table ("Errors and exit codes") must list 0, 1, 2 and 130, and for every command `qkv --help`
lists:
  0    `qkv CMD --help` (and `qkv --version`, `qkv --help`);
  1    bad input: the command run on a file or checkpoint that does not exist or cannot be read
       (BAD_INPUT below has one for each command; a new command without one fails this check);
  2    usage: an unknown flag (named, with "Run 'qkv CMD --help' for usage."), and a bare `qkv`;
  130  interrupted: `qkv train` stopped by SIGINT saves and exits 130.
Every failure's first error line starts with "qkv: error: ". Prints what differs; exit status 1
when anything does.
"""
from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MISSING = "/nonexistent-qkv-path"
# One bad-input run per command: what it reads does not exist, or is not what it should be.
BAD_INPUT = {
    "train": ["--src", MISSING, "--tgt", MISSING, "--output-dir", "{tmp}/train"],
    "init": ["--config", "{tmp}/bad.json", "--output-dir", "{tmp}/init"],
    "translate": ["--checkpoint", MISSING],
    "generate": ["--checkpoint", MISSING, "--prompt", "a", "--max-new-tokens", "1"],
    "score": ["--checkpoint", MISSING, "--tgt", MISSING],
    "bleu": [MISSING],
    "chrf": [MISSING],
    "average": ["--output-dir", "{tmp}/avg", "--checkpoint", MISSING],
    "info": ["--checkpoint", MISSING],
    "import": ["--from", "hf", MISSING, "--output-dir", "{tmp}/imp"],
    "export": ["--to", "hf", "--checkpoint", MISSING, "--output-dir", "{tmp}/exp"],
    "embed": ["--checkpoint", MISSING],
    "similar": ["--checkpoint", MISSING, "--corpus", "{tmp}/bad.json", "--query", "a"],
    "classify": ["--checkpoint", MISSING],
    "tokenize": ["--tokenizer", MISSING],
    "plot": [MISSING],
    "serve": ["--model", f"a={MISSING}", "--port", "0"],
}


def run(qkv: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([qkv, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)


def first_error(stderr: str) -> str:
    return next((l for l in stderr.splitlines() if "error" in l), "")


def commands(qkv: str) -> list[str]:
    sub = run(qkv, ["--help"]).stdout.split("Subcommands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^\s+([a-z]+)\s", sub, re.M)]


def interrupted_training(qkv: str, tmp: str) -> int:
    """The exit status of `qkv train` stopped by SIGINT once it has made a step."""
    log = Path(tmp, "train.log")
    with log.open("w") as err:
        p = subprocess.Popen([qkv, "train", "--synthetic", "--preset", "tiny", "--steps", "1000000", "--log-every", "1",
                              "--threads", "1", "--output-dir", f"{tmp}/interrupted"],
                             stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(600):
            if "step " in log.read_text() or p.poll() is not None:
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        return p.wait(timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--doc", required=True)
    a = ap.parse_args()
    a.qkv = str(Path(a.qkv).resolve())  # a bare name would be looked up on PATH
    doc = Path(a.doc).read_text(encoding="utf-8")
    table = doc.split("## Errors and exit codes", 1)[1].split("\n## ", 1)[0]
    statuses = re.findall(r"^\| (\d+) \|", table, re.M)
    problems = [] if statuses == ["0", "1", "2", "130"] else [f"the exit-code table lists {statuses}, expected 0 1 2 130"]
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bad.json").write_text("{ not json")

        def expect(args: list[str], code: int, what: str, usage_of: str | None = None) -> None:
            nonlocal checked
            checked += 1
            r = run(a.qkv, args)
            if r.returncode != code:
                problems.append(f"qkv {' '.join(args)}: exit {r.returncode}, expected {code} ({what}): {r.stderr[-300:]!r}")
            elif code in (1, 2) and args and not first_error(r.stderr).startswith("qkv: error: "):
                problems.append(f"qkv {' '.join(args)}: no 'qkv: error: ' line: {r.stderr[-300:]!r}")
            elif usage_of and f"Run '{usage_of} --help' for usage." not in r.stderr:
                problems.append(f"qkv {' '.join(args)}: no \"Run '{usage_of} --help' for usage.\" line")

        expect(["--help"], 0, "help")
        expect(["--version"], 0, "version")
        expect([], 2, "a bare qkv")
        expect(["train", "--arch", "decoder-only", "--text", f"{tmp}/bad.json"], 2, "a text run without --output-dir",
               usage_of="qkv train")
        for c in commands(a.qkv):
            expect([c, "--help"], 0, "help")
            expect([c, "--no-such-flag"], 2, "an unknown flag", usage_of=f"qkv {c}")
            if c not in BAD_INPUT:
                problems.append(f"qkv {c}: no bad-input case in check_exit_codes.py")
                continue
            expect([c, *(x.replace("{tmp}", tmp) for x in BAD_INPUT[c])], 1, "bad input")
        start = time.monotonic()
        code = interrupted_training(a.qkv, tmp)
        checked += 1
        if code != 130:
            problems.append(f"qkv train interrupted by SIGINT: exit {code}, expected 130")
    for p in problems:
        print(p)
    print(f"{checked} runs checked ({time.monotonic() - start:.1f} s for the interrupted one); {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
