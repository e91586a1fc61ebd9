#!/usr/bin/env bash
# qkv on a CPU below its x86-64-v3 baseline (QEMU's user-mode emulation of an Intel Nehalem: no AVX,
# AVX2, FMA, ...) says which instruction sets the CPU lacks and exits 1 (cli/cpu_gate.cpp), where it
# used to die of an illegal instruction (status 132). Skipped (77) without qemu-x86_64
# (scripts/install_deps.sh installs qemu-user).
#   tests/cli/check_cpu_gate.sh QKV_BINARY
set -uo pipefail
qkv=$1
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not installed: skipped"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
for args in "--version" "translate --help" "train --synthetic --steps 1 --output-dir /nonexistent/never"; do
  # shellcheck disable=SC2086
  err=$(qemu-x86_64 -cpu Nehalem "$qkv" $args 2>&1 >/dev/null)
  status=$?
  [ "$status" -eq 1 ] || fail "qkv $args on a Nehalem: exit $status, expected 1 ($err)"
  [[ "$err" == "qkv: error: this CPU lacks AVX, AVX2, FMA,"* ]] || fail "qkv $args on a Nehalem said: $err"
done
# A CPU with the baseline passes the gate (QEMU's Haswell model has AVX2, FMA, BMI and MOVBE).
out=$(qemu-x86_64 -cpu Haswell "$qkv" --version 2>/dev/null) || fail "qkv --version on a Haswell: exit $?"
[[ "$out" == "qkv "* ]] || fail "qkv --version on a Haswell printed: $out"
echo "ok: below the baseline, exit 1 and the missing instruction sets named; at it, qkv runs"
