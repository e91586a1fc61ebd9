#!/usr/bin/env bash
# Attention scores unscaled (T5's layout, as bench/t5_text_to_text.sh trains it) against scaled by
# 1/sqrt(d_head), nothing else changed: es_en alone, 3 + 3 layers, 500 steps of at most 3,000 tokens,
# the same seed; prints each run's validations (dev loss, greedy BLEU on 300 Mark verses).
# docs/runs.md's T5 section reads it. Usage: bench/t5_scale_probe.sh [T5_RUN] [OUT]
# (defaults runs/t5_text_to_text, whose tasks/ and t5.json it reads, and runs/t5_probe).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-runs/t5_text_to_text}
OUT=${2:-runs/t5_probe}
[ -f "$RUN/tasks/train.es_en.tsv" ] && [ -f "$RUN/t5.json" ] || { echo "$RUN: run bench/t5_text_to_text.sh first"; exit 1; }
mkdir -p "$OUT"
cp "$RUN/t5.json" "$OUT/t5_unscaled.json"
sed 's/"scale_attention_scores": false, //' "$RUN/t5.json" > "$OUT/t5_scaled.json"
T=$RUN/tasks
for v in unscaled scaled; do
  [ -f "$OUT/$v/last/train_state.json" ] || build/qkv train --tsv "$T/train.es_en.tsv" \
    --valid-src "$T/dev.es_en.src" --valid-tgt "$T/dev.es_en.tgt" --output-dir "$OUT/$v" --config "$OUT/t5_$v.json" \
    --threads "${QKV_THREADS:-$(nproc)}" --spm-vocab 4000 --max-seq-length 200 --d-model 256 --heads 4 --layers 3 \
    --d-ff 1024 --dropout 0.1 --schedule linear --lr 1e-3 --warmup 150 --steps 500 --label-smoothing 0.1 \
    --clip-norm 1.0 --max-batch-tokens 3000 --valid-every 250 --valid-bleu-sentences 300 --log-every 100 \
    --precision bf16 --seed 1
  echo "-- $v"
  grep -h '"validation"' "$OUT/$v/metrics.jsonl" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("step %d: dev loss %.4f, greedy dev BLEU %.2f" % (r["step"], r["loss"], r["bleu"]))'
done
