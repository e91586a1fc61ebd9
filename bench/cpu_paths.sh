#!/usr/bin/env bash
# Every CPU kernel path this machine offers, tested and then measured, in one run (issue 34: a path
# never run on a machine that has it is not called done). For each level of kernels/isa.h the CPU
# allows (QKV_ISA) the kernel and agreement tests; for each float32 tile (QKV_FLOAT32_TILE) the
# float32 GEMM against OpenBLAS (the training shapes, and attention's per-head products); bf16 GEMM
# at each bf16 level (vdpbf16ps, AMX) against float32, attention's heads included; the int8 GEMM at
# each int8 level (AVX2, VNNI, AMX); the training step against PyTorch with each tile and bf16
# level, where the peers' venv is there. Ends with a summary of the test results.
#
# Usage: bench/cpu_paths.sh [BUILD]   (default build; needs its qkv, tests/qkv_tests and bench/)
# The first thing to run on a machine of a class not seen before. (The AMX kernels and the 6 x 32
# tile first ran on an Intel Xeon with AMX on 2026-12-02; docs/performance.md.)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
for f in qkv tests/qkv_tests bench/bench_gemm bench/bench_int8_gemm; do
  [ -x "$BUILD/$f" ] || { echo "missing $BUILD/$f: build first (README.md)"; exit 1; }
done
"$BUILD/qkv" --version | sed -n 2,3p
levels=()
for level in avx2 avx512 avx512_vnni avx512_bf16 amx; do
  QKV_ISA=$level "$BUILD/qkv" --version | grep -q "^kernels:  $level (" && levels+=("$level")
done
tiles=()
for tile in 6x16 6x32; do
  QKV_FLOAT32_TILE=$tile "$BUILD/qkv" --version | grep -q "packed float32 GEMM (6 x" && tiles+=("$tile")
done
echo "levels this CPU allows: ${levels[*]}; float32 tiles: ${tiles[*]}"

# The agreement tests read PyTorch's references (a CTest fixture): generate them in a fresh build.
if [ ! -d "$BUILD/ref" ] || [ -z "$(ls -A "$BUILD/ref")" ]; then
  echo "== PyTorch references (ctest -L ref; once a build)"
  ctest --test-dir "$BUILD" -L ref -j2 --output-on-failure | tail -1
fi

summary=()
filter='Bf16Gemm*:Int8Gemm*:PackedGemm*:BlockedGemm*:GeluKernel*:DropoutKernels*:OpReference*:Bf16Agreement*:LinearComputeType*:Forms/LinearOnEveryBackend*:SeedAgreement*:GptAgreement*'
run_tests() {  # run_tests LABEL ENV...
  local label=$1
  shift
  echo "== tests, $label"
  if env "$@" "$BUILD/tests/qkv_tests" --gtest_filter="$filter" --gtest_brief=1 > "/tmp/cpu_paths.$$.log" 2>&1; then
    summary+=("$label: passed ($(grep -o '[0-9]* tests\? from' "/tmp/cpu_paths.$$.log" | head -1 | cut -d' ' -f1) tests)")
  else
    grep -E '^\[  FAILED  \]|Failure' "/tmp/cpu_paths.$$.log" | head -20
    summary+=("$label: FAILED (see above)")
  fi
  rm -f "/tmp/cpu_paths.$$.log"
}
for level in "${levels[@]}"; do run_tests "QKV_ISA=$level" QKV_ISA="$level"; done
for tile in "${tiles[@]}"; do run_tests "QKV_FLOAT32_TILE=$tile" QKV_FLOAT32_TILE="$tile"; done

for tile in "${tiles[@]}"; do
  echo "== float32 GEMM, QKV_FLOAT32_TILE=$tile"
  QKV_FLOAT32_TILE=$tile "$BUILD/bench/bench_gemm" --reps 5
  echo "== attention's per-head products (qkv's GEMM since 2026-11-29, OpenBLAS before), QKV_FLOAT32_TILE=$tile"
  QKV_FLOAT32_TILE=$tile "$BUILD/bench/bench_gemm" --heads --reps 15
done
for level in avx512_bf16 amx; do
  [[ " ${levels[*]} " == *" $level "* ]] || continue
  echo "== bf16 GEMM, QKV_ISA=$level"
  QKV_ISA=$level "$BUILD/bench/bench_gemm" --bf16 --reps 5
  echo "== bf16 attention products (--precision bf16's heads against float32's), QKV_ISA=$level"
  QKV_ISA=$level "$BUILD/bench/bench_gemm" --bf16 --heads --reps 15
done
for level in avx2 avx512_vnni amx; do
  [[ " ${levels[*]} " == *" $level "* ]] || continue
  echo "== int8 GEMM, QKV_ISA=$level"
  QKV_ISA=$level "$BUILD/bench/bench_int8_gemm" --reps 5
done
# The training steps against PyTorch 2.x (the issue's targets) with each float32 tile, and in bf16 at
# each bf16 level, where the peers' venv is there (bench/setup_peers.sh).
if [ -x "$BUILD/bench/bench_train_step" ] && [ -x "$BUILD/bench-venv/bin/python" ]; then
  for tile in "${tiles[@]}"; do
    echo "== training step, float32, QKV_FLOAT32_TILE=$tile (vs PyTorch float32)"
    OMP_WAIT_POLICY=passive QKV_FLOAT32_TILE=$tile "$BUILD/bench/bench_train_step" --steps 3
  done
  for level in avx512_bf16 amx; do
    [[ " ${levels[*]} " == *" $level "* ]] || continue
    echo "== training step, --precision bf16, QKV_ISA=$level (vs PyTorch's bf16 autocast)"
    OMP_WAIT_POLICY=passive QKV_ISA=$level "$BUILD/bench/bench_train_step" --steps 3 --precision bf16
  done
else
  echo "(no training steps: build bench_train_step and run bench/setup_peers.sh for PyTorch)"
fi
echo "== summary ($("$BUILD/qkv" --version | sed -n 's/^CPU: *//p'))"
printf '%s\n' "${summary[@]}"
[[ "${summary[*]}" != *FAILED* ]]
