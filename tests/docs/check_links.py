#!/usr/bin/env python3
"""Checks the relative links of README.md and docs/*.md: each file exists, and each #anchor is a
heading of its target (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).

Usage: check_links.py REPO_DIR
Prints each broken link as FILE:LINE: LINK (why); exit status 1 when there is one.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    found, in_code = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6} (.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def main() -> int:
    repo = Path(sys.argv[1]).resolve()
    files = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    broken = 0
    for f in files:
        in_code = False
        for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                dest = (f.parent / path).resolve() if path else f
                why = None
                if not dest.exists():
                    why = "no such file"
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    why = f"no heading #{anchor} in {dest.relative_to(repo)}"
                if why:
                    broken += 1
                    print(f"{f.relative_to(repo)}:{number}: {target} ({why})")
    print(f"{len(files)} files, {broken} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
