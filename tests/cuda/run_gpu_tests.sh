#!/usr/bin/env bash
# Runs the CUDA backend's tests where a GPU is; elsewhere skips them by name and says so (the
# binary itself reports how many GPUs it sees: --gtest_list_tests needs none).
set -euo pipefail
bin="$1"
shift
# A here-string, not `nvidia-smi -L | grep -q`: with pipefail, grep -q leaving at the first of several
# GPU lines can kill nvidia-smi with SIGPIPE and make the pipeline false.
if command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU ' <<< "$(nvidia-smi -L 2>/dev/null)"; then
  exec "$bin" "$@"
fi
echo "cuda: no GPU on this machine: the GPU tests are skipped by name" \
  "(OpsOnGpu.*, ModelsOnGpu.*, DataParallelOnGpu.*, TrainerOnGpu.*); listed:"
"$bin" --gtest_list_tests | sed 's/^/  /'
