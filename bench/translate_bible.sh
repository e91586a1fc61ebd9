#!/usr/bin/env bash
# Spanish -> English on the Bible (issue 4's benchmark): prepares the corpus, trains qkv with a
# wall-clock budget on this machine, translates the test book (John) with beam search, and prints
# BLEU and chrF against the KJV next to Apertium's rule-based spa->eng translation of the same verses.
#
# Usage: [AVERAGE=3] bench/translate_bible.sh [BUDGET] [OUT]      (default: 1h50m, runs/bible)
# Translates with OUT/best (best dev BLEU) and OUT/average (the mean of the last AVERAGE validation
# checkpoints) and scores both.
# Needs: build/qkv, diatheke + sword-text-sparv + sword-text-kjv, apertium-eng-spa (apt-get installs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${1:-1h50m}
OUT=${2:-runs/bible}
DATA=data/bible
QKV=build/qkv
THREADS=${QKV_THREADS:-$(nproc)}
AVERAGE=${AVERAGE:-3}  # validation checkpoints averaged into OUT/average

for pkg in diatheke sword-text-sparv sword-text-kjv apertium-eng-spa; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { echo "installing $pkg"; apt-get install -y -qq "$pkg" >/dev/null; }
done
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }

echo "== corpus"
python3 scripts/prepare_bible_corpus.py --out "$DATA"

echo "== training (budget $BUDGET, $THREADS threads)"
start=$(date +%s)
RESUME=()
[ -f "$OUT/last/train_state.json" ] && RESUME=(--resume "$OUT")
"$QKV" train --src "$DATA/train.es" --tgt "$DATA/train.en" --valid-src "$DATA/dev.es" --valid-tgt "$DATA/dev.en" \
  ${RESUME[@]+"${RESUME[@]}"} --out "$OUT" --threads "$THREADS" \
  --spm-vocab 8000 --max-len 160 --d-model 256 --heads 4 --layers 4 --d-ff 1024 --dropout 0.1 \
  --schedule inverse_sqrt --lr 8e-4 --warmup 800 --label-smoothing 0.1 --clip-norm 1.0 --max-tokens 6000 \
  --valid-every 300 --valid-bleu-sentences 300 --keep-checkpoints "$AVERAGE" --time-budget "$BUDGET" --log-every 50
train_seconds=$(( $(date +%s) - start ))

# The mean of the last $AVERAGE validation checkpoints (the paper's checkpoint averaging).
MODELS=(best)
mapfile -t kept < <(ls -d "$OUT"/step-* 2>/dev/null | tail -n "$AVERAGE")
if [ "${#kept[@]}" -gt 0 ]; then
  "$QKV" average --out "$OUT/average" "${kept[@]}"
  MODELS+=(average)
fi

echo "== translating John"
for model in "${MODELS[@]}"; do
  "$QKV" translate --checkpoint "$OUT/$model" --input "$DATA/test.es" --beam 5 --length-penalty 1.0 --threads "$THREADS" \
    > "$OUT/test.$model.en"
done
apertium -u spa-eng < "$DATA/test.es" > "$OUT/test.apertium.en"

echo "== scores on John ($(wc -l < "$DATA/test.en") verses) against the KJV"
params=$(python3 -c "import json;c=json.load(open('$OUT/best/config.json'));print(c['d_model'],c['num_heads'],c['num_layers'],c['d_ff'],c['tgt_vocab_size'])")
for model in "${MODELS[@]}"; do
  printf "%-12s %s\n" "qkv $model" "$("$QKV" bleu "$DATA/test.en" < "$OUT/test.$model.en")"
  printf "%-12s %s\n" "qkv $model" "$("$QKV" chrf "$DATA/test.en" < "$OUT/test.$model.en")"
done
printf "%-12s %s\n" "apertium" "$("$QKV" bleu "$DATA/test.en" < "$OUT/test.apertium.en")"
printf "%-12s %s\n" "apertium" "$("$QKV" chrf "$DATA/test.en" < "$OUT/test.apertium.en")"
echo "model (d_model heads layers d_ff vocab): $params; wall-clock training incl. data prep: ${train_seconds}s"
