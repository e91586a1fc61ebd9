#!/usr/bin/env bash
# The GPU checks, run on a machine with an NVIDIA GPU from the repository root, over the bundle
# that scripts/gpu_bundle.sh made of a -DQKV_CUDA=ON build (default .gpu/). Prints a summary and
# writes logs and gtest's JSON under $OUT (default /tmp/qkv-gpu). docs/gpu.md keeps the results.
set -uo pipefail
bundle="${1:-.gpu}"
out="${OUT:-/tmp/qkv-gpu}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
# The CUDA libraries: the toolkit's, or the pip wheels' next to PyTorch.
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/$bundle/lib:/usr/local/cuda/lib64:${cublas_dir:-}:${LD_LIBRARY_PATH:-}"
if ldd "$bundle/qkv_cuda_tests" | grep "not found"; then echo "missing libraries"; exit 1; fi
status=0
echo "== the GPU tests (every op against the CPU, whole models)"
"$bundle/qkv_cuda_tests" --gtest_output="json:$out/gpu_tests.json" 2>&1 | tee "$out/gpu_tests.log" | \
  grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|error|Expected|Which is|actual|cpu .* gpu" | head -80
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ -x "$bundle/bench_gpu_step" ]; then
  echo "== training-step benchmark"
  "$bundle/bench_gpu_step" 2>&1 | tee "$out/bench.log"
fi
if command -v compute-sanitizer >/dev/null && [ "${QKV_SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck over the op tests"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$bundle/qkv_cuda_tests" --gtest_filter='OpsOnGpu.*:-*Exhausted*' \
    > "$out/memcheck.log" 2>&1
  echo "memcheck exit $? ($(grep -c 'Invalid\|ERROR SUMMARY' "$out/memcheck.log") lines of errors/summary)"
  grep -E "ERROR SUMMARY|Invalid" "$out/memcheck.log" | head -20
fi
exit $status
