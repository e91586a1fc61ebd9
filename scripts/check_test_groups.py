#!/usr/bin/env python3
"""Checks that every test group CI expects was registered and ran, after `ctest` in BUILD_DIR.

Usage: scripts/check_test_groups.py BUILD_DIR FLAVOR [--groups tests/expected_groups.txt]

A group is a CTest label (tests/CMakeLists.txt, bench/CMakeLists.txt). Whole groups can vanish at
configure time (no pybind11: no Python module tests; no MPI: no data-parallel tests) with a STATUS
line nobody reads, and a test can skip itself; either way CTest still ends "100% tests passed".
This script reads the list of groups expected in build FLAVOR (release, asan, ...) with their
minimum test counts, what `ctest --show-only=json-v1` registered, and what the last ctest run
recorded (Testing/Temporary/LastTest.log), and fails when:
  - an expected group has fewer tests registered than its minimum;
  - a registered test has no label (it would belong to no group);
  - a test of an expected group did not run and pass (skipped, not run, failed, or absent from the
    last run), except a test named on a `skip` line of the groups file, with its reason.
Prints one line per group: "groups: <label>: <ran> of <registered> ran and passed (minimum <n>)".
Exit status: 0 all expected groups complete, 1 otherwise, 2 bad usage or unreadable input.
"""

import json
import re
import subprocess
import sys
from pathlib import Path


def parse_groups(path, flavor):
    """Returns ({label: minimum}, [(regex, reason)]) for `flavor` from the groups file."""
    minimums, skips = {}, []
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if fields[0] == "skip":
            if len(fields) < 3:
                sys.exit(f"{path}:{number}: expected `skip REGEX REASON...`")
            skips.append((re.compile(fields[1]), " ".join(fields[2:])))
            continue
        if len(fields) != 3:
            sys.exit(f"{path}:{number}: expected `LABEL FLAVORS MINIMUM`, got {raw!r}")
        label, flavors, minimum = fields
        if flavor in flavors.split(","):
            try:
                minimums[label] = int(minimum)
            except ValueError:
                sys.exit(f"{path}:{number}: minimum {minimum!r} is not a number")
    return minimums, skips


def registered_tests(build):
    """{name: (labels, disabled)} as CTest registered them in `build`."""
    # `ctest --show-only` replaces the last run's log with one of its own: put the log back, so
    # that this check can be run again.
    log = Path(build) / "Testing" / "Temporary" / "LastTest.log"
    saved = log.read_bytes() if log.exists() else None
    out = subprocess.run(["ctest", "--test-dir", str(build), "--show-only=json-v1"], capture_output=True, text=True)
    if saved is not None:
        log.write_bytes(saved)
    if out.returncode != 0:
        sys.exit(f"ctest --show-only=json-v1 failed in {build}: {out.stderr.strip()}")
    tests = {}
    for test in json.loads(out.stdout)["tests"]:
        labels, disabled = [], False
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = list(prop["value"])
            elif prop["name"] == "DISABLED":
                disabled = bool(prop["value"])
        tests[test["name"]] = (labels, disabled)
    return tests


def last_results(build):
    """{name: 'Passed' | 'Failed' | 'Skipped' | ...} from the last ctest run's log.

    CTest writes "Test Passed." or "Test Failed." before a test's end line; a test whose
    SKIP_REGULAR_EXPRESSION (gtest's "[  SKIPPED ]") or PASS_REGULAR_EXPRESSION matched gets
    "Test Pass Reason:" and the reason on the next line instead.
    """
    log = Path(build) / "Testing" / "Temporary" / "LastTest.log"
    if not log.exists():
        sys.exit(f"{log} is missing: run ctest in {build} first")
    results, status, reason_next = {}, None, False
    for line in log.read_text(errors="replace").splitlines():
        if reason_next:
            status = "Skipped" if line.startswith("Skip regular expression found") else "Passed"
            reason_next = False
            continue
        if line == "Test Pass Reason:":
            reason_next = True
            continue
        m = re.match(r"^Test (Passed|Failed)\.", line)
        if m:
            status = m.group(1)
            continue
        m = re.match(r'^"(.+)" end time:', line)
        if m:
            results[m.group(1)] = status or "unknown"
            status = None
    return results


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build, flavor = Path(argv[1]), argv[2]
    groups = Path(__file__).resolve().parent.parent / "tests" / "expected_groups.txt"
    if len(argv) >= 5 and argv[3] == "--groups":
        groups = Path(argv[4])
    minimums, skips = parse_groups(groups, flavor)
    if not minimums:
        print(f"groups: no group is expected for flavor {flavor!r} in {groups}", file=sys.stderr)
        return 2
    results = last_results(build)
    tests = registered_tests(build)
    problems = []
    for name, (labels, _) in sorted(tests.items()):
        if not labels:
            problems.append(f"{name} has no label (tests/CMakeLists.txt: give it a group)")
    for label, minimum in sorted(minimums.items()):
        members = [n for n, (labels, disabled) in tests.items() if label in labels and not disabled]
        passed, excused = 0, 0
        for name in sorted(members):
            status = results.get(name, "absent from the last run")
            if status == "Passed":
                passed += 1
                continue
            reason = next((why for rx, why in skips if rx.search(name)), None)
            if reason is not None and status == "Skipped":
                excused += 1
                print(f"groups: {label}: {name} skipped ({reason})")
                continue
            problems.append(f"{label}: {name}: {status}")
        line = f"groups: {label}: {passed} of {len(members)} ran and passed (minimum {minimum})"
        print(line + (f", {excused} skipped with a reason" if excused else ""))
        if len(members) < minimum:
            problems.append(f"{label}: {len(members)} tests registered, {minimum} expected"
                            " (a dependency missing at configure time? see cmake's output)")
    for p in problems:
        print(f"groups: FAILED {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
