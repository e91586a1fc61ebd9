#!/usr/bin/env bash
# The GPU checks, run on a machine with an NVIDIA GPU from the repository root, over the bundle
# that scripts/gpu_bundle.sh made of a -DQKV_CUDA=ON build (default .gpu/). Prints a summary and
# writes logs and gtest's JSON under $OUT (default /tmp/qkv-gpu). docs/gpu.md keeps the results.
set -uo pipefail
bundle="${1:-.gpu}"
out="${OUT:-/tmp/qkv-gpu}"
mkdir -p "$out"
if [ -f "$bundle/bundle.tar.xz" ]; then tar -C "$bundle" -xJf "$bundle/bundle.tar.xz"; fi
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
echo "== qkv train --device cuda (the CLI, a synthetic copy task, a checkpoint written from the GPU)"
"$bundle/qkv" train --synthetic --preset tiny --task copy --steps 60 --device cuda --out "$out/copy-ckpt" 2>&1 | tail -4
"$bundle/qkv" info "$out/copy-ckpt" 2>&1 | head -3
rm -rf "$out/copy-ckpt"
if command -v compute-sanitizer >/dev/null && [ "${QKV_SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck over the op tests"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$bundle/qkv_cuda_tests" --gtest_filter='OpsOnGpu.*:-*Exhausted*' \
    > "$out/memcheck.log" 2>&1
  echo "memcheck exit $? ($(grep -c 'Invalid\|ERROR SUMMARY' "$out/memcheck.log") lines of errors/summary)"
  grep -E "ERROR SUMMARY|Invalid" "$out/memcheck.log" | head -20
  for tool in racecheck synccheck initcheck; do  # shared-memory races, barriers, reads of unwritten memory
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$bundle/qkv_cuda_tests" \
      --gtest_filter='OpsOnGpu.*:-*Exhausted*' > "$out/$tool.log" 2>&1
    echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log")"
  done
fi
# GPT training steps on the GPU: qkv (float32) against PyTorch eager float32 with SDPA, steps
# alternating (bench_lm_train), then PyTorch's best mode (torch.autocast bf16, SDPA) alone. Two
# shapes: the CPU benchmark's small GPT, and GPT-2 small (124M) at batch 16 x 1024, the issue's.
bench_gpt() {  # NAME STEPS FLAGS...
  local name="$1" steps="$2"
  shift 2
  echo "== $name: qkv float32 and PyTorch float32 (SDPA), alternating"
  QKV_BENCH_DIR="$PWD/bench" "$bundle/bench_lm_train" --device cuda --steps "$steps" "$@" --attention sdpa \
    --python python3 2>&1 | tee "$out/bench_$name.log" | grep -E "^(GPT|qkv|pytorch|ratio)"
  echo "== $name: PyTorch torch.autocast bf16 (SDPA)"
  python3 bench/lm_train_torch.py --steps "$steps" --threads 4 "$@" --attention sdpa --device cuda --autocast bf16 \
    > "$out/torch_bf16_$name.json" 2>&1
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("pytorch bf16 autocast: step %.4f s (median of %d), %.0f tokens/s" % (j["median_step_seconds"], len(j["step_seconds"]), j["tokens_per_second"]))' \
    "$out/torch_bf16_$name.json" || tail -5 "$out/torch_bf16_$name.json"
}
if [ -x "$bundle/bench_lm_train" ] && [ "${QKV_BENCH:-1}" = 1 ]; then
  bench_gpt gpt-small 10 --batch 8 --block 256 --layers 6 --d-model 512 --heads 8 --d-ff 2048 --vocab 8000 --dropout 0.1
  export -f bench_gpt
  export bundle out
  timeout 130 bash -c 'bench_gpt gpt2-124m 3 --batch 16 --block 1024 --layers 12 --d-model 768 --heads 12 \
    --d-ff 3072 --vocab 50257 --dropout 0.0' || echo "gpt2-124m: did not finish within 130 s"
fi
exit $status
