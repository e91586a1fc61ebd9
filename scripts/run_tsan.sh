#!/usr/bin/env bash
# Builds (if needed) and runs the ThreadSanitizer build of the threaded kernels (tests/tsan/) with
# 2 threads. Exits non-zero on any TSan report or failed test.
#
#   scripts/run_tsan.sh [BUILD_DIR]        default: build-tsan
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1)
[[ -n $archer ]] || { echo "tsan: libarcher.so not found (apt-get install libomp-14-dev)" >&2; exit 2; }
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S tests/tsan -B "$build" >/dev/null
fi
cmake --build "$build" -j2 >/dev/null
# Archer makes OpenMP's synchronisation visible to TSan; halt_on_error turns the first report into
# a failure. OpenBLAS (not instrumented) runs single-threaded inside the kernels' parallel regions.
OMP_TOOL_LIBRARIES="$archer" ARCHER_OPTIONS="verbose=1" \
TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4" \
QKV_TEST_THREADS=2 OMP_NUM_THREADS=2 \
  "$build/qkv_kernels_tsan_tests" --gtest_brief=1
echo "tsan: threaded kernels clean with 2 threads"
