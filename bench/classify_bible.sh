#!/usr/bin/env bash
# The encoder-only run of docs/runs.md's "Encoder-only: classifying Bible verses by book group": labels
# the KJV verses by book group (scripts/prepare_bible_classes.py), pretrains a small BERT with the
# masked-LM objective under a wall-clock budget, fine-tunes it as a classifier under another, labels
# the test verses with `qkv classify`, and prints the figures docs/runs.md quotes: test accuracy and
# macro-F1, the F1 of each class, and the score of always answering the largest class.
#
# Usage: [LINES=N] [VOCAB=8000] [VALID_EVERY=200] bench/classify_bible.sh [MLM_BUDGET] [CLS_BUDGET] [OUT]
#        (default: 12m, 10m, runs/bible-classes; docs/runs.md: accuracy 0.639, macro-F1 0.466 with those budgets)
# LINES=N keeps about N verses of each split (train, dev, test), evenly spaced: with a small VOCAB,
# VALID_EVERY and budgets it checks the script end to end in a minute, e.g.
#   LINES=1500 VOCAB=500 VALID_EVERY=10 bench/classify_bible.sh 15s 15s runs/bible-classes-tiny
# (its figures mean nothing). Needs: build/qkv, diatheke + sword-text-sparv + sword-text-kjv.
set -euo pipefail
cd "$(dirname "$0")/.."
MLM_BUDGET=${1:-12m}
CLS_BUDGET=${2:-10m}
OUT=${3:-runs/bible-classes}
DATA=data/bible
CLASSES=data/bible-classes
QKV=build/qkv
THREADS=${QKV_THREADS:-2}
VOCAB=${VOCAB:-8000}
VALID_EVERY=${VALID_EVERY:-200}
LINES=${LINES:-}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # as measured
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }
# Builds data/bible first when it is missing.
[ -f "$CLASSES/test.tsv" ] || python3 scripts/prepare_bible_classes.py --corpus "$DATA" --out "$CLASSES"
mkdir -p "$OUT"
IN="$OUT/data"
mkdir -p "$IN"
for f in train.txt dev.txt train.tsv dev.tsv test.tsv; do
  if [ -n "$LINES" ]; then  # about LINES lines, evenly spaced (the files are in canonical order: every class)
    total=$(wc -l < "$CLASSES/$f")
    awk -v step=$(( (total + LINES - 1) / LINES )) '(NR - 1) % step == 0' "$CLASSES/$f" > "$IN/$f"
  else
    cp "$CLASSES/$f" "$IN/$f"
  fi
done

sgemm_ceiling() {
  [ -x build/bench/bench_int8_gemm ] && build/bench/bench_int8_gemm --threads "$THREADS" --sgemm-ceiling 2>/dev/null | tail -1
  return 0
}
echo "machine before training: $(sgemm_ceiling)"
rm -rf "$OUT/mlm" "$OUT/cls"
# docs/runs.md's commands.
echo "== masked-LM pretraining (budget $MLM_BUDGET, $THREADS threads, vocabulary $VOCAB${LINES:+, about $LINES verses of each split})"
"$QKV" train --arch encoder-only --objective mlm --text "$IN/train.txt" --valid-text "$IN/dev.txt" \
  --output-dir "$OUT/mlm" --spm-vocab "$VOCAB" --d-model 128 --heads 4 --layers 4 --d-ff 512 --block-size 128 --batch-size 32 \
  --lr 1e-3 --warmup 300 --valid-every "$VALID_EVERY" --time-budget "$MLM_BUDGET" --threads "$THREADS" 2> "$OUT/mlm.log"
INIT="$OUT/mlm/best"
[ -d "$INIT" ] || INIT="$OUT/mlm/last"  # no validation ran
echo "== fine-tuning from $INIT (budget $CLS_BUDGET)"
"$QKV" train --arch encoder-only --objective classify --labelled "$IN/train.tsv" \
  --valid-labelled "$IN/dev.tsv" --init "$INIT" --output-dir "$OUT/cls" --block-size 128 --batch-size 32 \
  --lr 3e-4 --warmup 100 --valid-every "$VALID_EVERY" --time-budget "$CLS_BUDGET" --threads "$THREADS" 2> "$OUT/cls.log"
echo "machine after training: $(sgemm_ceiling)"
MODEL="$OUT/cls/best"
[ -d "$MODEL" ] || MODEL="$OUT/cls/last"

start=$(date +%s.%N)
cut -f2 "$IN/test.tsv" | "$QKV" classify --checkpoint "$MODEL" --threads "$THREADS" > "$OUT/test.pred"
classify_seconds=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")

python3 - "$OUT" "$IN/test.tsv" "$OUT/test.pred" "$classify_seconds" <<'PY'
import json, os, sys
from collections import Counter
out, gold_path, pred_path, seconds = sys.argv[1:]

def last_validation(run):
    rows = [json.loads(l) for l in open(os.path.join(out, run, "metrics.jsonl")) if l.strip()]
    vals = [r for r in rows if r.get("event") == "validation"]
    step = json.load(open(os.path.join(out, run, "last", "train_state.json")))["step"]
    return step, vals

step, vals = last_validation("mlm")
v = vals[-1] if vals else {}
print(f"pretraining: {step} steps; masked-LM dev loss {v.get('loss', float('nan')):.2f}, accuracy "
      f"{v.get('accuracy', float('nan')):.3f} at the last validation")
step, vals = last_validation("cls")
best = [r for r in vals if r.get("best")]
b = best[-1] if best else {}
print(f"fine-tuning: {step} steps; best dev accuracy {b.get('accuracy', float('nan')):.3f}, "
      f"macro-F1 {b.get('macro_f1', float('nan')):.3f} (step {b.get('step', '?')})")

gold = [line.split("\t", 1)[0] for line in open(gold_path, encoding="utf-8").read().split("\n") if line]
pred = [line.split("\t", 1)[0] for line in open(pred_path, encoding="utf-8").read().split("\n") if line]
if len(gold) != len(pred):
    sys.exit(f"{pred_path}: {len(pred)} predictions for {len(gold)} test verses")
labels = sorted(set(gold) | set(pred))
f1 = {}
for c in labels:
    tp = sum(g == c and p == c for g, p in zip(gold, pred))
    fp = sum(g != c and p == c for g, p in zip(gold, pred))
    fn = sum(g == c and p != c for g, p in zip(gold, pred))
    f1[c] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
# Macro-F1 over the labels that are gold or predicted, as qkv's validation computes it
# (train/encoder_eval.cpp): a gold class never predicted counts 0.
gold_classes = sorted(set(gold))
macro = sum(f1[c] for c in labels) / len(labels)
accuracy = sum(g == p for g, p in zip(gold, pred)) / len(gold)
largest, count = Counter(gold).most_common(1)[0]
print("per class F1: " + ", ".join(f"{c} {f1[c]:.2f}" for c in sorted(gold_classes, key=lambda c: -f1[c])))
print(f"always answering the largest class ({largest}): accuracy {count / len(gold):.3f}")
print(f"qkv classify labelled the {len(gold)} test verses in {seconds} s")
print(f"test: accuracy {accuracy:.3f}, macro-F1 {macro:.3f} ({len(gold)} verses)")
PY
