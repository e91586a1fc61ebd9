#!/usr/bin/env bash
# bf16 mixed-precision training against float32 on the Bible (issue 34's convergence check): the
# recipe of bench/translate_bible.sh trained twice for the same number of steps, once per
# --precision, same seed and data order; then each model translates dev (Mark) and John with
# beam 5 in every compute type (float32, int8, bf16). Prints the greedy dev BLEU at each validation
# side by side, the seconds per step, and a BLEU table. Equal steps, not equal time: the question is
# whether bf16 products change what is learned; the speed is the step time beside it.
#
# Usage: [STEPS=900] [VALID_EVERY=300] [WARMUP=STEPS/3] [VOCAB=4000] [QKV_THREADS=N] [QKV=build/qkv] bench/bible_precision.sh [OUT]
#        (default OUT runs/bible-precision; QKV names a copy of the binary, so that rebuilding during a
#        run that spans sessions cannot change the binary between its resumed parts)
# Needs: build/qkv, and the packages bench/translate_bible.sh installs (diatheke, the SWORD texts).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bible-precision}
STEPS=${STEPS:-900}
VALID_EVERY=${VALID_EVERY:-300}
# The recipe warms up for 800 steps; a shorter run warms up for its first third.
WARMUP=${WARMUP:-$(( STEPS >= 2400 ? 800 : STEPS / 3 ))}
VOCAB=${VOCAB:-4000}
THREADS=${QKV_THREADS:-$(nproc)}
DATA=data/bible
QKV=${QKV:-build/qkv}
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }
for pkg in diatheke sword-text-sparv sword-text-kjv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { echo "installing $pkg"; apt-get install -y -qq "$pkg" >/dev/null; }
done
[ -f "$DATA/test.en" ] || python3 scripts/prepare_bible_corpus.py --out "$DATA"
echo "machine: $("$QKV" --version | sed -n 2,4p | tr "\n" " ")"

# The two runs train side by side, each on half the threads: they see the same machine (their step
# times compare), and a partial run still has validations at the same steps in both.
train_run() {  # train_run PRECISION THREADS
  local precision=$1 threads=$2 run="$OUT/$1" resume=() saved
  saved=$(python3 -c "import json;print(json.load(open('$run/last/train_state.json'))['step'])" 2>/dev/null || true)
  if [ "$saved" = "$STEPS" ]; then
    echo "== $precision: already trained ($run)"; return
  fi
  # A run stopped part-way (a session ended, kill -9) continues from its last save: the full-length
  # comparison takes longer than one sitting on some machines. Resume is exact, so the two runs still
  # see the same steps. A saved run of another length starts again.
  if [ -n "$saved" ] && grep -q "^$precision $STEPS$" "$run/length" 2>/dev/null; then
    echo "== $precision: resuming at step $saved of $STEPS (log: $run/train.log)"
    resume=(--resume "$run")
  else
    rm -rf "$run"
    mkdir -p "$run"
    echo "$precision $STEPS" > "$run/length"
    echo "== training in $precision: $STEPS steps, $threads threads, vocabulary $VOCAB (log: $run/train.log)"
  fi
  # bench/translate_bible.sh's recipe, the schedule ending at STEPS; a save every 50 steps bounds what a
  # stop loses.
  "$QKV" train "${resume[@]}" --save-every 50 --src "$DATA/train.es" --tgt "$DATA/train.en" --valid-src "$DATA/dev.es" --valid-tgt "$DATA/dev.en" \
    --output-dir "$run" --threads "$threads" --precision "$precision" --seed 1 \
    --spm-vocab "$VOCAB" --max-seq-length 160 --d-model 256 --heads 4 --layers 4 --d-ff 1024 --dropout 0.1 \
    --schedule linear --lr 1e-3 --warmup "$WARMUP" --steps "$STEPS" --label-smoothing 0.1 --clip-norm 1.0 \
    --max-batch-tokens 6000 --valid-every "$VALID_EVERY" --valid-bleu-sentences 300 --log-every 50 >> "$run/train.log" 2>&1
}
half=$(( THREADS / 2 > 0 ? THREADS / 2 : 1 ))
train_run float32 "$half" &
float32_job=$!
train_run bf16 "$half" &
bf16_job=$!
wait "$float32_job" || { echo "float32 training failed: $OUT/float32/train.log"; exit 1; }
wait "$bf16_job" || { echo "bf16 training failed: $OUT/bf16/train.log"; exit 1; }

bleu_of() {  # bleu_of REF HYP: the corpus BLEU as a bare number
  "$QKV" bleu --json "$1" < "$2" | python3 -c "import json,sys;print(round(json.load(sys.stdin)['score'],2))"
}
echo "== translating dev ($(wc -l < "$DATA/dev.en") Mark verses) and John ($(wc -l < "$DATA/test.en") verses), beam 5"
for precision in float32 bf16; do
  for type in float32 int8 bf16; do
    for set in dev test; do
      hyp="$OUT/$precision/$set.$type.en"
      # Written whole, then renamed: a translation stopped part-way (a session ending) leaves no file
      # that a later run would take as done.
      [ -s "$hyp" ] || { "$QKV" translate --checkpoint "$OUT/$precision/last" --input "$DATA/$set.es" --beam-size 5 \
        --length-penalty 1.0 --threads "$THREADS" --compute-type "$type" --quiet > "$hyp.part" && mv "$hyp.part" "$hyp"; }
    done
  done
done

python3 - "$OUT" "$DATA" "$QKV" <<'EOF'
import json, statistics, subprocess, sys
out, data, qkv = sys.argv[1:4]
def events(p):
    return [json.loads(l) for l in open(f"{out}/{p}/metrics.jsonl")]
def bleu(ref, hyp):
    r = subprocess.run([qkv, "bleu", "--json", ref], stdin=open(hyp), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["score"]
print("\ngreedy dev BLEU (300 Mark verses) at each validation")
print(f"{'step':>6} {'float32':>8} {'bf16':>8} {'bf16-float32':>13}")
valid = {p: {e["step"]: e.get("bleu") for e in events(p) if e["event"] == "validation"} for p in ("float32", "bf16")}
for step in sorted(valid["float32"]):
    a, b = valid["float32"][step], valid["bf16"].get(step)
    if a is None or b is None: continue
    print(f"{step:>6} {a:>8.2f} {b:>8.2f} {b - a:>+13.2f}")
print("\nseconds per step (median of the logged intervals)")
for p in ("float32", "bf16"):
    steps = [e for e in events(p) if e["event"] == "step"]
    per = [(b["time"] - a["time"]) / (b["step"] - a["step"]) for a, b in zip(steps, steps[1:]) if b["step"] > a["step"]]
    print(f"  {p}: {statistics.median(per):.3f} s/step" if per else f"  {p}: (no step events)")
print("\nBLEU, beam 5 (rows: training precision; columns: compute type of the translation)")
print(f"{'trained in':<10} {'set':<5} {'float32':>8} {'int8':>8} {'bf16':>8} {'int8-f32':>9} {'bf16-f32':>9}")
for p in ("float32", "bf16"):
    for s in ("dev", "test"):
        b = {t: bleu(f"{data}/{s}.en", f"{out}/{p}/{s}.{t}.en") for t in ("float32", "int8", "bf16")}
        print(f"{p:<10} {s:<5} {b['float32']:>8.2f} {b['int8']:>8.2f} {b['bf16']:>8.2f} "
              f"{b['int8'] - b['float32']:>+9.2f} {b['bf16'] - b['float32']:>+9.2f}")
EOF
