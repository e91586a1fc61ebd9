#!/usr/bin/env bash
# Data-parallel training on the Bible translation model (issue 13): 2 MPI ranks x 1 thread against
# 1 process x 2 threads and 1 process x 1 thread, same global batch (--max-batch-tokens 6000), same
# model as bench/translate_bible.sh. Prints target tokens/s (steps after the first log window),
# the scaling efficiency of the 2 ranks (tokens/s over 2x one thread's) and rank 0's all-reduce
# report (bytes per step, seconds per step spent after backward).
#
# Usage: [LOG=N] bench/bench_mpi_train.sh [STEPS] [OUT]     (default: 12 steps, log every 4, runs/mpi-bench)
# Needs: build/qkv built with MPI, mpirun, diatheke + sword-text-sparv + sword-text-kjv.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-12}
OUT=${2:-runs/mpi-bench}
DATA=data/bible
QKV=build/qkv
LOG=${LOG:-4}
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }
[ -f "$DATA/train.es" ] || python3 scripts/prepare_bible_corpus.py --out "$DATA"
MODEL=(--src "$DATA/train.es" --tgt "$DATA/train.en" --spm-vocab 8000 --max-seq-length 160 --d-model 256 --heads 4
       --layers 4 --d-ff 1024 --dropout 0.1 --schedule inverse_sqrt --lr 8e-4 --warmup 800 --label-smoothing 0.1
       --clip-norm 1.0 --max-batch-tokens 6000 --valid-every 0 --log-every "$LOG")
mkdir -p "$OUT"
# One vocabulary for all runs (a run reuses OUT/spm.model when it exists).
if [ ! -f "$OUT/spm.model" ]; then
  "$QKV" train "${MODEL[@]}" --steps 1 --output-dir "$OUT/vocab" --threads 2 2> "$OUT/vocab.log"
  cp "$OUT/vocab/spm.model" "$OUT/vocab/spm.vocab" "$OUT/"
fi
fresh() { rm -rf "$1"; mkdir -p "$1"; cp "$OUT/spm.model" "$OUT/spm.vocab" "$1/"; }
MODEL+=(--steps "$STEPS")

# tokens/s and seconds per step over the log windows after the first (warm-up), from metrics.jsonl
rate() { python3 - "$1" "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l.replace(" ", "")]
rows = rows[1:] or rows
tok = sum(r["tokens"] for r in rows)
sec = sum(r["tokens"] / r["tokens_per_second"] for r in rows)
print(f"{tok / sec:.0f} {sec / (len(rows) * int(sys.argv[2])):.2f}")
PY
}

fresh "$OUT/p1t1"; "$QKV" train "${MODEL[@]}" --output-dir "$OUT/p1t1" --threads 1 2> "$OUT/p1t1.log"
fresh "$OUT/p1t2"; "$QKV" train "${MODEL[@]}" --output-dir "$OUT/p1t2" --threads 2 2> "$OUT/p1t2.log"
fresh "$OUT/r2t1"; mpirun --allow-run-as-root --oversubscribe -np 2 "$QKV" train "${MODEL[@]}" --output-dir "$OUT/r2t1" \
  --threads 1 2> "$OUT/r2t1.log"
fresh "$OUT/r2t1n"; mpirun --allow-run-as-root --oversubscribe -np 2 "$QKV" train "${MODEL[@]}" --output-dir "$OUT/r2t1n" \
  --threads 1 --no-overlap 2> "$OUT/r2t1n.log"

read -r t11 s11 < <(rate "$OUT/p1t1/metrics.jsonl")
read -r t12 s12 < <(rate "$OUT/p1t2/metrics.jsonl")
read -r t21 s21 < <(rate "$OUT/r2t1/metrics.jsonl")
read -r t21n s21n < <(rate "$OUT/r2t1n/metrics.jsonl")
echo "target tokens/s and seconds per step (steps $((LOG + 1))..$STEPS, global batch <= 6000 tokens):"
echo "  1 process x 1 thread : $t11 tok/s, $s11 s/step"
echo "  1 process x 2 threads: $t12 tok/s, $s12 s/step  (efficiency vs 2 x one thread: $(python3 -c "print(f'{$t12/(2*$t11):.2f}')"))"
echo "  2 ranks x 1 thread   : $t21 tok/s, $s21 s/step  (efficiency: $(python3 -c "print(f'{$t21/(2*$t11):.2f}')"); vs 1 x 2 threads: $(python3 -c "print(f'{$t21/$t12:.2f}')")x)"
echo "  2 ranks, no overlap  : $t21n tok/s, $s21n s/step"
echo "rank 0's all-reduce report:"
grep "all-reduce:" "$OUT/r2t1.log" "$OUT/r2t1n.log" | sed 's/^/  /'
