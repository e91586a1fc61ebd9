#!/usr/bin/env python3
"""Runs a command and passes only if it exits 0 AND its output has a line matching a pattern.

Usage: expect_output.py REGEX -- COMMAND [ARG...]

CTest's PASS_REGULAR_EXPRESSION replaces the exit-code check instead of adding to it: a script
that prints "ok" and then fails would pass. This wrapper requires both. The command's output is
passed through unchanged; the verdict is the last line, and the exit status is 0 (pass) or 1.
"""

import re
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    pattern = re.compile(argv[1], re.MULTILINE)
    proc = subprocess.run(argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.decode("utf-8", "replace")
    sys.stdout.write(output)
    if proc.returncode != 0:
        print(f"expect_output: {argv[3]} exited with status {proc.returncode}")
        return 1
    if not pattern.search(output):
        print(f"expect_output: {argv[3]} exited 0 but printed no line matching {argv[1]!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
