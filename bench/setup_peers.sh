#!/usr/bin/env bash
# Creates (once, cached) the virtual environment the decoder-only benchmarks use for their peers:
# PyTorch 2.x, transformers, safetensors, numpy from PyPI. Idempotent: a second run only checks
# that the packages import. Not part of CI.
#
#   bench/setup_peers.sh [VENV]        # default: build/bench-venv
#
# PyPI's torch for Linux brings CUDA wheels (several GB); set QKV_TORCH_INDEX to use another
# index, e.g. https://download.pytorch.org/whl/cpu for the CPU-only wheels.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$root/build/bench-venv}"
python="${PYTHON:-python3}"

check() {
  "$venv/bin/python" - <<'PY'
import torch, transformers, safetensors, numpy
assert int(torch.__version__.split(".")[0]) >= 2, torch.__version__
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, numpy {numpy.__version__}")
PY
}

if [ -x "$venv/bin/python" ] && check 2>/dev/null; then
  echo "bench peers ready in $venv"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip >/dev/null
if [ -n "${QKV_TORCH_INDEX:-}" ]; then
  "$venv/bin/python" -m pip install --index-url "$QKV_TORCH_INDEX" 'torch>=2,<3'
else
  "$venv/bin/python" -m pip install 'torch>=2,<3'
fi
"$venv/bin/python" -m pip install transformers safetensors numpy
check
echo "bench peers ready in $venv"
