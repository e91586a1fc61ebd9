#!/usr/bin/env bash
# The padding figures of docs/cli.md's `qkv train` section (and docs/performance.md, "Batches sorted by
# their longer side"): on the Bible corpus with translate_bible.sh's model and batches of <= 6000
# tokens, batches sorted by the longer side of each pair (qkv's order) against fairseq's
# source-then-target order: the share of padding cells on each side (what `qkv train` prints at its
# start) and the target tokens per second of training, measured in the same run.
#
# Both arms start from one checkpoint saved after the first WINDOW steps (one vocabulary, the same
# weights); the source-first arm is that checkpoint with its batch order set to source_then_target
# (what a run saved before 2026-11-25 resumes with: train/training_data.cpp), the other keeps
# longer_side. The arms then alternate, WINDOWS times: each resumes for 2 x WINDOW steps, logging
# every WINDOW, and the second window's tokens/s counts (the first after a resume fills the buffer
# pool); so a drift in the shared machine's speed reaches both alike. Prints each arm's padding, its
# windows and their median, and the ratio.
#
# Usage: [WINDOW=10] [WINDOWS=3] bench/padding_bible.sh [OUT]   (default OUT: runs/bible-padding)
# WINDOW=1 WINDOWS=1 checks the script end to end in about a minute (the padding figures are the
# real ones; the tokens/s of one step mean little).
# Needs: build/qkv, diatheke + sword-text-sparv + sword-text-kjv.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bible-padding}
DATA=data/bible
QKV=build/qkv
THREADS=${QKV_THREADS:-2}
WINDOW=${WINDOW:-10}
WINDOWS=${WINDOWS:-3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ -x "$QKV" ] || { echo "build qkv first (see README.md)"; exit 1; }
[ -f "$DATA/train.es" ] || python3 scripts/prepare_bible_corpus.py --out "$DATA"
# translate_bible.sh's model and batches; the schedule does not depend on --steps, so that each
# resume may go further.
MODEL=(--src "$DATA/train.es" --tgt "$DATA/train.en" --threads "$THREADS" --spm-vocab 4000 --max-seq-length 160
       --d-model 256 --heads 4 --layers 4 --d-ff 1024 --dropout 0.1 --schedule inverse_sqrt --lr 1e-3 --warmup 800
       --label-smoothing 0.1 --clip-norm 1.0 --max-batch-tokens 6000 --valid-every 0 --log-every "$WINDOW")
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== the common start: $WINDOW steps"
"$QKV" train "${MODEL[@]}" --steps "$WINDOW" --output-dir "$OUT/start" 2> "$OUT/start.log"
for arm in longer_side source_then_target; do
  cp -r "$OUT/start" "$OUT/$arm"
  rm -f "$OUT/$arm/metrics.jsonl"
done
# The source-first arm: its saved batch order changed, and the checkpoint's manifest (sizes and CRC-32
# of its files) updated to match.
python3 - "$OUT/source_then_target/last" <<'PY'
import json, os, sys, zlib
last = sys.argv[1]
state_path = os.path.join(last, "train_state.json")
state = json.load(open(state_path))
state["data"]["length_order"] = "source_then_target"
with open(state_path, "w") as f:
    f.write(json.dumps(state, indent=2) + "\n")
manifest_path = os.path.join(last, "manifest.json")
manifest = json.load(open(manifest_path))
data = open(state_path, "rb").read()
manifest["files"]["train_state.json"] = {"bytes": len(data), "crc32": f"{zlib.crc32(data) & 0xffffffff:08x}"}
with open(manifest_path, "w") as f:
    f.write(json.dumps(manifest, indent=2) + "\n")
PY

step=$WINDOW
for w in $(seq 1 "$WINDOWS"); do
  step=$((step + 2 * WINDOW))
  for arm in longer_side source_then_target; do
    echo "== window $w/$WINDOWS: $arm to step $step"
    "$QKV" train "${MODEL[@]}" --resume "$OUT/$arm" --output-dir "$OUT/$arm" --steps "$step" 2> "$OUT/$arm.$w.log"
  done
done

python3 - "$OUT" "$WINDOWS" <<'PY'
import json, os, re, statistics, sys
out, windows = sys.argv[1], int(sys.argv[2])
median = {}
for arm in ("longer_side", "source_then_target"):
    log = open(os.path.join(out, f"{arm}.1.log")).read()
    m = re.search(r"(\d+) batches/epoch of <= (\d+) tokens, sorted by ([a-z ]+) \(padding: ([\d.]+)% of source cells, "
                  r"([\d.]+)% of target cells\)", log)
    if not m:
        sys.exit(f"{arm}: qkv train printed no batch summary (see {out}/{arm}.1.log)")
    rows = [json.loads(l) for l in open(os.path.join(out, arm, "metrics.jsonl")) if l.strip()]
    steps = [r for r in rows if r.get("event") == "step"]
    if len(steps) != 2 * windows:
        sys.exit(f"{arm}: {len(steps)} logged windows in metrics.jsonl, expected {2 * windows}")
    kept = steps[1::2]  # the second window of each resume
    rates = [r["tokens_per_second"] for r in kept]
    median[arm] = statistics.median(rates)
    print(f"{arm:<19} {m.group(1)} batches/epoch, sorted by {m.group(3)}: padding {m.group(4)}% of source cells, "
          f"{m.group(5)}% of target cells; target tokens/s by window (steps "
          + ", ".join(f"..{r['step']}" for r in kept) + "): " + ", ".join(f"{x:.0f}" for x in rates)
          + f"; median {median[arm]:.0f}")
print(f"longer side / source first: {median['longer_side'] / median['source_then_target']:.2f}x the target tokens/s "
      f"(medians of {windows} windows each, arms alternating)")
PY
