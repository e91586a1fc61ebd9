#!/usr/bin/env bash
# Runs one benchmark for CTest's smoke tests (bench/CMakeLists.txt, label bench) and passes only when
# it exits 0 AND its output (stdout and stderr) has a line matching every --expect pattern (extended
# regular expressions, grep -E): a benchmark that crashes, fails, or ends without printing its
# result line fails the test. (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit status.)
#
#   bench/smoke_run.sh --expect REGEX [--expect REGEX ...] -- COMMAND [ARGS...]
set -uo pipefail
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --expect) [ $# -ge 2 ] || { echo "smoke_run.sh: --expect needs a pattern" >&2; exit 2; }
              patterns+=("$2"); shift 2 ;;
    *) echo "smoke_run.sh: unknown argument $1 (usage: --expect REGEX ... -- COMMAND ...)" >&2; exit 2 ;;
  esac
done
[ $# -ge 2 ] && [ "${#patterns[@]}" -gt 0 ] || { echo "smoke_run.sh: need --expect REGEX ... -- COMMAND" >&2; exit 2; }
shift  # the --
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -ne 0 ]; then
  echo "smoke_run.sh: FAILED: \`$*\` exited with status $status" >&2
  exit 1
fi
# A here-string, not `printf | grep -q`: grep -q exits at its first match, and a printf still writing
# the lines after it then dies of SIGPIPE, which pipefail turned into "no line matches" now and then.
for p in "${patterns[@]}"; do
  if ! grep -Eq -- "$p" <<< "$out"; then
    echo "smoke_run.sh: FAILED: no line of the output matches /$p/ (the benchmark's result line)" >&2
    exit 1
  fi
done
echo "smoke_run.sh: ok (exit 0; ${#patterns[@]} result pattern(s) found)"
