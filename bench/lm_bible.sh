#!/usr/bin/env bash
# The language model of docs/runs.md's "Language model: the Bible's English side": a small GPT trained
# on the English side of the Bible corpus under a wall-clock budget, then its held-out perplexity on
# John (`qkv score --text`, float32 and --quantize int8) and a greedy continuation. Prints the figures
# docs/runs.md quotes: the dev perplexity by validation, the steps done, the test perplexity.
#
# Usage: [LINES=N] [VOCAB=8000] [VALID_EVERY=500] bench/lm_bible.sh [BUDGET] [OUT]
#        (default: 30m, runs/bible-lm; docs/runs.md: 30m gave test perplexity 69.7, 60m gave 49.7)
# LINES=N trains on the first N training verses and scores the first N of dev and test: with a
# small VOCAB, VALID_EVERY and BUDGET it checks the script end to end in a minute, e.g.
#   LINES=2000 VOCAB=500 VALID_EVERY=20 bench/lm_bible.sh 20s runs/bible-lm-tiny
# (its figures mean nothing). Needs: build/qkv, diatheke + sword-text-sparv + sword-text-kjv.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${1:-30m}
OUT=${2:-runs/bible-lm}
DATA=data/bible
QKV=build/qkv
THREADS=${QKV_THREADS:-2}
VOCAB=${VOCAB:-8000}
VALID_EVERY=${VALID_EVERY:-500}
LINES=${LINES:-}
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }
[ -f "$DATA/train.en" ] || python3 scripts/prepare_bible_corpus.py --out "$DATA"
mkdir -p "$OUT"

TEXT="$OUT/text"
mkdir -p "$TEXT"
for split in train dev test; do
  if [ -n "$LINES" ]; then head -n "$LINES" "$DATA/$split.en" > "$TEXT/$split.en"; else cp "$DATA/$split.en" "$TEXT/$split.en"; fi
done

sgemm_ceiling() {
  [ -x build/bench/bench_int8_gemm ] && build/bench/bench_int8_gemm --threads "$THREADS" --sgemm-ceiling 2>/dev/null | tail -1
  return 0
}
echo "machine before training: $(sgemm_ceiling)"
echo "== training (budget $BUDGET, $THREADS threads, vocabulary $VOCAB${LINES:+, the first $LINES lines})"
rm -rf "$OUT/lm"
start=$(date +%s)
# docs/runs.md's command.
"$QKV" train --arch decoder-only --text "$TEXT/train.en" --valid-text "$TEXT/dev.en" --output-dir "$OUT/lm" \
  --spm-vocab "$VOCAB" --d-model 256 --heads 4 --layers 4 --d-ff 1024 --block-size 128 --batch-size 16 \
  --lr 1e-3 --warmup 500 --valid-every "$VALID_EVERY" --time-budget "$BUDGET" --threads "$THREADS" 2> "$OUT/train.log"
train_seconds=$(( $(date +%s) - start ))
echo "machine after training: $(sgemm_ceiling)"
steps=$(python3 -c "import json;print(json.load(open('$OUT/lm/last/train_state.json'))['step'])")
MODEL="$OUT/lm/best"
[ -d "$MODEL" ] || MODEL="$OUT/lm/last"  # no validation ran

echo "== dev (Mark) perplexity by validation (metrics.jsonl)"
python3 - "$OUT/lm/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r for r in rows if r.get("event") == "validation"]
for r in vals:
    print(f"  step {r['step']}: dev perplexity {r['perplexity']:.1f}" + (" (best so far)" if r.get("best") else ""))
if not vals:
    print("  (no validation in this run)")
PY

echo "== test (John) perplexity, $(basename "$MODEL") checkpoint"
"$QKV" score --checkpoint "$MODEL" --text "$TEXT/test.en" --threads "$THREADS" > "$OUT/test.score"
"$QKV" score --checkpoint "$MODEL" --text "$TEXT/test.en" --threads "$THREADS" --quantize int8 > "$OUT/test.int8.score"
ppl=$(awk '/^perplexity/ {print $2}' "$OUT/test.score")
ppl_int8=$(awk '/^perplexity/ {print $2}' "$OUT/test.int8.score")
tokens=$(awk '/^tokens/ {print $2}' "$OUT/test.score")
for v in "$ppl" "$ppl_int8" "$tokens"; do
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "lm_bible.sh: qkv score printed no perplexity (see $OUT/test.score, $OUT/test.int8.score)" >&2; exit 1; }
done
echo "greedy continuation of \"And Jesus said unto them\": $("$QKV" generate --checkpoint "$MODEL" \
  --prompt "And Jesus said unto them" --max-new-tokens 40 --threads "$THREADS" 2> "$OUT/generate.log")"
params=$("$QKV" info "$MODEL" --json | python3 -c "import json,sys;print(json.load(sys.stdin).get('parameters', '?'))")
echo "model: $params parameters; $steps steps in ${train_seconds}s of wall-clock training (budget $BUDGET)"
printf "test (John) perplexity %.1f (%s tokens); with --quantize int8 %.1f\n" "$ppl" "$tokens" "$ppl_int8"
