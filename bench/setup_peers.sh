#!/usr/bin/env bash
# Creates (once, cached) the virtual environment the benchmarks use for their peers: PyTorch 2.x,
# transformers, safetensors, numpy (decoder-only benchmarks), sentence-transformers and ctranslate2
# (bench_embed), ctranslate2 and sentencepiece (bench_translate) from PyPI. Idempotent: a second run
# only checks that the packages import; a venv made before a package was added here gets just the
# missing ones. Not part of CI.
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
import torch, transformers, safetensors, numpy, sentence_transformers, ctranslate2, sentencepiece
assert int(torch.__version__.split(".")[0]) >= 2, torch.__version__
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, numpy {numpy.__version__}, "
      f"sentence-transformers {sentence_transformers.__version__}, ctranslate2 {ctranslate2.__version__}, "
      f"sentencepiece {sentencepiece.__version__}")
PY
}

if [ -x "$venv/bin/python" ] && check 2>/dev/null; then
  echo "bench peers ready in $venv"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip >/dev/null
# torch first, from the chosen index; an existing torch 2.x is kept (pip sees it satisfied).
if [ -n "${QKV_TORCH_INDEX:-}" ]; then
  "$venv/bin/python" -m pip install --index-url "$QKV_TORCH_INDEX" 'torch>=2,<3'
else
  "$venv/bin/python" -m pip install 'torch>=2,<3'
fi
# torch's requirement repeated, so that no dependency of these takes torch out of 2.x.
"$venv/bin/python" -m pip install transformers safetensors numpy 'sentence-transformers>=3' ctranslate2 sentencepiece 'torch>=2,<3'
check
echo "bench peers ready in $venv"
