#!/usr/bin/env bash
# Runs the CUDA backend's tests where a GPU is; elsewhere skips them by name and says so (the
# binary itself reports how many GPUs it sees: --gtest_list_tests needs none).
set -euo pipefail
bin="$1"
shift
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  exec "$bin" "$@"
fi
echo "cuda: no GPU on this machine: the GPU tests are skipped by name" \
  "(OpsOnGpu.*, ModelsOnGpu.*, DataParallelOnGpu.*); listed:"
"$bin" --gtest_list_tests | sed 's/^/  /'
