#!/usr/bin/env bash
# T5's text-to-text idea on the Bible corpus (issue 35; seed 003: "a text-to-text framework that turns
# every NLP task into text generation"): one T5-layout model trained by qkv on three tasks written as
# text with prefixes (bench/t5_tasks.py: Spanish -> English, English -> Spanish, a verse's book group),
# beside three single-task models of the same size trained for the same number of steps (the same
# batches of tokens, so the same compute). Each model's last checkpoint is scored on each of its
# tasks' dev split (BLEU; accuracy), into its metrics.jsonl ("task_eval" records) and a table.
#
# Usage: [STEPS=2400] [WARMUP=800] [VOCAB=4000] [LAYERS=4] [BATCH_TOKENS=6000] [VALID_EVERY=600] \
#        [MODELS="all es_en en_es classes"] [PRECISION=float32|bf16] [QKV_THREADS=N] \
#        bench/t5_text_to_text.sh [OUT]          (default OUT: runs/t5_text_to_text)
# Each model trains with the linear schedule (800 warm-up steps to lr 1e-3, then to 0 at STEPS), so
# its last checkpoint is the annealed one; a model whose OUT/NAME/last already holds STEPS steps is
# not trained again (an interrupted one resumes from its last save, every 50 steps). The model: T5 v1.1's layout (pre-norm RMSNorm,
# relative position bias, unscaled scores, no biases, gated GELU) at the Bible recipe's size (d 256,
# 4 heads, 4 + 4 layers, d_ff 1024; bench/translate_bible.sh). At 2 cores about 2.7 s a step
# (docs/runs.md), so the default takes about 4 x 1.8 hours of a quiet machine; PRECISION=bf16 trains
# every model in mixed precision (`qkv train --precision bf16`: about 1.6x faster where the CPU has
# AVX512_BF16, docs/compute.md), the four alike, so the comparison stays one of equal compute.
# Needs: build/qkv, diatheke + sword-text-sparv + sword-text-kjv (scripts/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/t5_text_to_text}
QKV=build/qkv
STEPS=${STEPS:-2400}
WARMUP=${WARMUP:-800}
VOCAB=${VOCAB:-4000}
LAYERS=${LAYERS:-4}
BATCH_TOKENS=${BATCH_TOKENS:-6000}
VALID_EVERY=${VALID_EVERY:-600}
MODELS=${MODELS:-all es_en en_es classes}
THREADS=${QKV_THREADS:-$(nproc)}
PRECISION=${PRECISION:-float32}
PY=/usr/bin/python3
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }

echo "== tasks"
[ -f data/bible/train.en ] || $PY scripts/prepare_bible_corpus.py --out data/bible
[ -f data/bible_classes/train.tsv ] || $PY scripts/prepare_bible_classes.py --corpus data/bible --out data/bible_classes
$PY bench/t5_tasks.py prepare --corpus data/bible --classes data/bible_classes --out "$OUT/tasks"

mkdir -p "$OUT"
cat > "$OUT/t5.json" <<'JSON'
{"norm": "pre", "layer_norm": "rms", "layer_norm_eps": 1e-6, "positions": "relative",
 "scale_attention_scores": false, "linear_bias": false, "gated_feed_forward": true,
 "activation": "gelu_tanh", "target_query_mask": false}
JSON

steps_done() {  # steps_done DIR: the steps of DIR/last, 0 without one
  [ -f "$1/last/train_state.json" ] || { echo 0; return; }
  $PY -c "import json,sys;print(json.load(open(sys.argv[1]))['step'])" "$1/last/train_state.json"
}

train() {  # train NAME TSV VALID_TASK
  local dir="$OUT/$1" resume=()
  if [ "$(steps_done "$dir")" -ge "$STEPS" ]; then echo "$1: $STEPS steps already trained"; return; fi
  [ -f "$dir/last/train_state.json" ] && resume=(--resume "$dir")
  echo "== training $1 ($STEPS steps, $LAYERS + $LAYERS layers, batches of $BATCH_TOKENS tokens, $THREADS threads, $PRECISION)"
  local start=$(date +%s)
  "$QKV" train --tsv "$2" --valid-src "$OUT/tasks/dev.$3.src" --valid-tgt "$OUT/tasks/dev.$3.tgt" \
    ${resume[@]+"${resume[@]}"} --output-dir "$dir" --config "$OUT/t5.json" --threads "$THREADS" \
    --spm-vocab "$VOCAB" --max-seq-length 200 --d-model 256 --heads 4 --layers "$LAYERS" --d-ff 1024 --dropout 0.1 \
    --schedule linear --lr 1e-3 --warmup "$WARMUP" --steps "$STEPS" --label-smoothing 0.1 --clip-norm 1.0 \
    --max-batch-tokens "$BATCH_TOKENS" --valid-every "$VALID_EVERY" --valid-bleu-sentences 300 --log-every 50 \
    --save-every 50 --precision "$PRECISION"
  echo "$1: trained in $(( $(date +%s) - start )) s"
}

tasks_of() { [ "$1" = all ] && echo "es_en en_es classes" || echo "$1"; }

for name in $MODELS; do
  case "$name" in
    all) train all "$OUT/tasks/train.all.tsv" es_en ;;
    es_en|en_es|classes) train "$name" "$OUT/tasks/train.$name.tsv" "$name" ;;
    *) echo "MODELS: unknown model $name (all, es_en, en_es, classes)"; exit 2 ;;
  esac
done

echo "== dev scores of each model's last checkpoint (translations: beam 4; labels: greedy)"
for name in $MODELS; do
  echo "-- $name"
  task_flags=()
  for t in $(tasks_of "$name"); do task_flags+=(--task "$t"); done
  $PY bench/t5_tasks.py evaluate --qkv "$QKV" --tasks "$OUT/tasks" --checkpoint "$OUT/$name/last" \
    --metrics "$OUT/$name/metrics.jsonl" --threads "$THREADS" "${task_flags[@]}"
done
echo "CPU: $("$QKV" --version | sed -n 's/^CPU: *//p'), $THREADS threads"
