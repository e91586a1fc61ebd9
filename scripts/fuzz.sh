#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a bounded time, one after another (one core).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]      defaults: 60, build-fuzz
#
# Configures (clang, -DQKV_FUZZ=ON) and builds BUILD_DIR if needed, then runs each target on a
# scratch copy of its seed corpus (fuzz/corpus/<target>/; the SentencePiece seeds are trained
# by fuzz_make_spm_seeds), so nothing is written into the repository. Prints one line per target:
#   fuzz <name>: <executions> executions in <seconds> s, <N> findings
# A finding (crash, sanitizer report, escaped exception, failed invariant, timeout, out of memory)
# stops that target; its reproducer is kept in BUILD_DIR/fuzz-findings/<name>/ and its path is
# printed (replay: BUILD_DIR/fuzz/fuzz_<name> REPRODUCER). Exits 1 if any target had a finding.
# QKV_FUZZ_SEED=S and QKV_FUZZ_RUNS=N make a run reproducible (libFuzzer's -seed and -runs: the
# same inputs in the same order on any machine; a slower machine stops earlier in the same
# sequence when the time runs out). CI uses them so its verdict does not depend on luck.
# QKV_FUZZ_KEEP_GOING=1 keeps each target fuzzing for the whole time after a finding (libFuzzer's
# fork mode, one child at a time) and counts every saved finding.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build=${2:-build-fuzz}
targets=(safetensors config_json id_lines parallel_text utf8 bleu_tokenizers sentencepiece_load tokenizer_json)

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DQKV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null ||
    { echo "fuzz: configuring $build failed" >&2; exit 2; }
fi
cmake --build "$build" -j2 --target fuzz_all >/dev/null 2>&1 ||
  { echo "fuzz: building $build failed (rerun: cmake --build $build --target fuzz_all)" >&2; exit 2; }

# Per-input files go to RAM when /dev/shm is writable.
scratch_parent=${TMPDIR:-/tmp}
[[ -w /dev/shm ]] && scratch_parent=/dev/shm
scratch=$(mktemp -d "$scratch_parent/qkv-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
findings_root="$build/fuzz-findings"
logs="$build/fuzz-logs"
mkdir -p "$findings_root" "$logs"

# Prepares the scratch corpus of target $1 and prints its directory.
prepare_corpus() {
  local name=$1 corpus="$scratch/corpus/$1"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
  if [[ $name == sentencepiece_load ]]; then
    "$build/fuzz/fuzz_make_spm_seeds" "$corpus" >&2 || echo "fuzz: SentencePiece seeds failed" >&2
  fi
  echo "$corpus"
}

any_finding=0
for name in "${targets[@]}"; do
  corpus=$(prepare_corpus "$name")
  artifacts="$findings_root/$name"
  rm -rf "$artifacts" && mkdir -p "$artifacts" "$scratch/tmp"
  log="$logs/$name.log"
  options=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
           -artifact_prefix="$artifacts/")
  [[ -f fuzz/$name.dict ]] && options+=(-dict="fuzz/$name.dict")
  [[ -n ${QKV_FUZZ_SEED:-} ]] && options+=(-seed="$QKV_FUZZ_SEED")
  [[ -n ${QKV_FUZZ_RUNS:-} ]] && options+=(-runs="$QKV_FUZZ_RUNS")
  # QKV_FUZZ_KEEP_GOING=1: fuzz the whole time even after findings (one child process at a time,
  # each finding saved), to count them over a long run instead of stopping at the first.
  [[ ${QKV_FUZZ_KEEP_GOING:-0} == 1 ]] && options+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  start=$(date +%s)
  OMP_NUM_THREADS=1 QKV_THREADS=1 QKV_FUZZ_SCRATCH="$scratch/tmp" \
    "$build/fuzz/fuzz_$name" "${options[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ -z $executions ]]; then  # a crash ends the run before the final stats; fork mode has none
    executions=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  fi
  reproducers=("$artifacts"/*)
  [[ -e ${reproducers[0]} ]] || reproducers=()
  count=${#reproducers[@]}
  if (( rc != 0 && count == 0 )); then count=1; fi  # died without saving an input: still a finding
  echo "fuzz $name: ${executions:-0} executions in $elapsed s, $count findings"
  if (( count > 0 )); then
    any_finding=1
    for r in "${reproducers[@]:0:10}"; do echo "  reproducer: $r (replay: $build/fuzz/fuzz_$name $r)"; done
    (( count > 10 )) && echo "  ... and $((count - 10)) more in $artifacts/"
    # What went wrong, each distinct line once with its count (fork mode repeats them).
    grep -E 'SUMMARY: |runtime error|invariant failed|what\(\)|ERROR: libFuzzer' "$log" |
      sed -E 's/==[0-9]+==//; s/0x[0-9a-f]+/0x.../g' | sort | uniq -c | sort -rn | head -8 | sed 's/^/  /'
    echo "  log: $log"
  fi
done
exit $any_finding
