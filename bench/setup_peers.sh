#!/usr/bin/env bash
# Creates (once, cached) the virtual environment the benchmarks use for their peers: PyTorch 2.x,
# transformers, safetensors, numpy (decoder-only benchmarks), sentence-transformers and ctranslate2
# (bench_embed), ctranslate2 and sentencepiece (bench_translate), fastapi and uvicorn (CTranslate2
# behind an HTTP server, as bench_serve's peer) from PyPI. Idempotent: a second run
# only checks that the packages import at the pinned versions; a venv made before a package was
# added or a pin moved gets just what differs. Prints the installed versions at the end. Not part of CI.
#
#   bench/setup_peers.sh [VENV]        # default: build/bench-venv
#
# The peers are pinned to the versions the figures in docs/performance.md, docs/compute.md and docs/runs.md were
# measured with (torch 2.15.0, transformers 5.23.0, sentence-transformers 6.2.0, CTranslate2 4.8.5);
# QKV_PEER_TORCH, QKV_PEER_TRANSFORMERS, QKV_PEER_SENTENCE_TRANSFORMERS and QKV_PEER_CTRANSLATE2
# override a pin (say which versions you measured with). safetensors, numpy, sentencepiece, fastapi
# and uvicorn are helpers, not timed, and take what pip resolves.
# PyPI's torch for Linux brings CUDA wheels (several GB); set QKV_TORCH_INDEX to use another
# index, e.g. https://download.pytorch.org/whl/cpu for the CPU-only wheels (torch 2.15.0+cpu).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$root/build/bench-venv}"
python="${PYTHON:-python3}"
TORCH=${QKV_PEER_TORCH:-2.15.0}
TRANSFORMERS=${QKV_PEER_TRANSFORMERS:-5.23.0}
SENTENCE_TRANSFORMERS=${QKV_PEER_SENTENCE_TRANSFORMERS:-6.2.0}
CTRANSLATE2=${QKV_PEER_CTRANSLATE2:-4.8.5}

# Imports everything and prints the versions; fails when a peer is not at its pin (torch's local
# label, +cpu or +cu..., is ignored).
check() {
  "$venv/bin/python" - "$TORCH" "$TRANSFORMERS" "$SENTENCE_TRANSFORMERS" "$CTRANSLATE2" <<'PY'
import sys
import torch, transformers, safetensors, numpy, sentence_transformers, ctranslate2, sentencepiece, fastapi, uvicorn
pins = dict(zip(["torch", "transformers", "sentence-transformers", "ctranslate2"], sys.argv[1:]))
have = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
        "sentence-transformers": sentence_transformers.__version__, "ctranslate2": ctranslate2.__version__}
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, numpy {numpy.__version__}, "
      f"sentence-transformers {sentence_transformers.__version__}, ctranslate2 {ctranslate2.__version__}, "
      f"sentencepiece {sentencepiece.__version__}, fastapi {fastapi.__version__}, uvicorn {uvicorn.__version__}")
off = [f"{k} {have[k]} (pinned {v})" for k, v in pins.items() if have[k] != v]
if off:
    sys.exit("not at the pinned versions: " + ", ".join(off))
PY
}

if [ -x "$venv/bin/python" ] && check >/dev/null 2>&1; then
  echo "bench peers ready in $venv:"
  check
  exit 0
fi

mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip >/dev/null
# torch first, from the chosen index.
if [ -n "${QKV_TORCH_INDEX:-}" ]; then
  "$venv/bin/python" -m pip install --index-url "$QKV_TORCH_INDEX" "torch==$TORCH"
else
  "$venv/bin/python" -m pip install "torch==$TORCH"
fi
# torch's pin repeated, so that no dependency of these moves it.
"$venv/bin/python" -m pip install "transformers==$TRANSFORMERS" safetensors numpy \
  "sentence-transformers==$SENTENCE_TRANSFORMERS" "ctranslate2==$CTRANSLATE2" sentencepiece fastapi uvicorn "torch==$TORCH"
echo "bench peers ready in $venv:"
check
