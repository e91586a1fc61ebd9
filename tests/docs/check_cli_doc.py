#!/usr/bin/env python3
"""Checks docs/cli.md against the qkv binary, both ways, and runs every renamed flag.

Usage: check_cli_doc.py --qkv BUILD/qkv --doc docs/cli.md

1. Every flag of every command's `--help` (but --help itself) is in that command's section of
   docs/cli.md (`## qkv CMD`, its table of flags), and every flag the section's table lists is in
   `--help`; the sections are exactly the commands `qkv --help` lists.
2. Every row of the "Renamed flags" table: the new flag is in the command's `--help` and the old
   one is not; `qkv CMD OLD VALUE` prints `qkv: note: OLD is deprecated; use NEW` first and reaches
   the command as NEW (a bad value is refused naming NEW, or the command complains of something
   else than an unknown flag); both the `OLD VALUE` and `OLD=VALUE` forms.
Prints what differs; exit status 1 when anything does.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][\w-]*|-[a-zA-Z])(?![\w-])")
# A value each renamed flag refuses, so that the error names the flag it reached; None: any value.
BAD_VALUE = {"--beam": "0", "--n-best": "0", "--top": "0", "--max-tokens": "0", "--batch": "0", "--max-len": "0",
             "--valid-beam": "0", "--sample": None, "--out": None}


def run(qkv: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([qkv, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


def commands(qkv: str) -> list[str]:
    text = run(qkv, "--help").stdout
    sub = text.split("Subcommands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^\s+([a-z]+)\s", sub, re.M)]


def help_flags(qkv: str, command: str) -> set[str]:
    flags = set()
    for line in run(qkv, command, "--help").stdout.splitlines():
        m = re.match(r"^\s+((?:-\w,)?--[\w-]+)", line)
        if m:
            flags.update(f for f in m.group(1).split(",") if f != "--help" and f != "-h")
    return flags


def doc_sections(doc: str) -> dict[str, str]:
    parts = re.split(r"^## qkv ([a-z]+)\n", doc, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def table_flags(section: str) -> set[str]:
    """The flags of the section's flag table: the first cell of each row that starts with a flag."""
    flags = set()
    for line in section.splitlines():
        m = re.match(r"^\| `(-[^`]*)` \|", line)
        if m:
            flags.update(FLAG.findall(m.group(1)))
    return flags


def renamed(doc: str) -> list[tuple[str, str, str]]:
    table = doc.split("## Renamed flags", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (\w+) \| `(--[\w-]+)` \| `(--[\w-]+)` \|$", table, re.M)


def check_alias(qkv: str, command: str, old: str, new: str, new_flags: set[str]) -> list[str]:
    problems = []
    if new not in new_flags:
        problems.append(f"qkv {command}: renamed flag {new} is not in --help")
    if old in new_flags:
        problems.append(f"qkv {command}: old flag {old} is still in --help")
    bad = BAD_VALUE[old]
    forms = [[old] if bad is None and old == "--sample" else [old, bad or "x"]]
    if old != "--sample":
        forms.append([f"{old}={bad or 'x'}"])
    for form in forms:
        r = run(qkv, command, *form)
        note = f"qkv: note: {old} is deprecated; use {new}"
        said = " ".join(form)
        if not r.stderr.startswith(note + "\n"):
            problems.append(f"qkv {command} {said}: stderr does not start with '{note}': {r.stderr!r}")
        if "unknown flag" in r.stderr or "not expected" in r.stderr or r.returncode == 0:
            problems.append(f"qkv {command} {said}: not taken as {new} (exit {r.returncode}): {r.stderr!r}")
        if bad is not None and f"{new}:" not in r.stderr and f"{new} " not in r.stderr:
            problems.append(f"qkv {command} {said}: the refusal does not name {new}: {r.stderr!r}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--doc", required=True)
    a = ap.parse_args()
    a.qkv = str(Path(a.qkv).resolve())  # a bare name would be looked up on PATH
    doc = Path(a.doc).read_text(encoding="utf-8")
    sections = doc_sections(doc)
    problems = []
    listed = commands(a.qkv)
    if sorted(listed) != sorted(sections):
        problems.append(f"commands in qkv --help {sorted(listed)} differ from docs/cli.md's sections {sorted(sections)}")
    flags = {c: help_flags(a.qkv, c) for c in listed}
    for c in listed:
        documented = table_flags(sections.get(c, ""))
        for f in sorted(flags[c] - documented):
            problems.append(f"qkv {c}: {f} is in --help but not in docs/cli.md")
        for f in sorted(documented - flags[c]):
            problems.append(f"qkv {c}: {f} is in docs/cli.md but not in --help")
    rows = renamed(doc)
    if len(rows) < 19:
        problems.append(f"the Renamed flags table has {len(rows)} rows; expected at least 19")
    for command, old, new in rows:
        problems += check_alias(a.qkv, command, old, new, flags.get(command, set()))
    for p in problems:
        print(p)
    print(f"{len(listed)} commands, {sum(map(len, flags.values()))} flags, {len(rows)} renamed flags checked; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
