#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a bounded time, one target a core (QKV_FUZZ_JOBS at a time).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]      defaults: 60, build-fuzz
#
# Configures (clang, -DQKV_FUZZ=ON) and builds BUILD_DIR if needed, then runs each target on a
# scratch copy of its seed corpus (fuzz/corpus/<target>/; the SentencePiece seeds are trained
# by fuzz_make_spm_seeds), so nothing is written into the repository. Prints one line per target:
#   fuzz <name>: <executions> executions in <seconds> s, <N> findings
# A finding (crash, sanitizer report, escaped exception, failed invariant, timeout, out of memory)
# stops that target; its reproducer is kept in BUILD_DIR/fuzz-findings/<name>/ and its path is
# printed (replay: BUILD_DIR/fuzz/fuzz_<name> REPRODUCER). Exits 1 if any target had a finding,
# ran fewer inputs than QKV_FUZZ_RUNS asked, or its seeds could not be made; each such target is
# named on a "FAILED" line, and the last line lists them all.
# QKV_FUZZ_SEED=S and QKV_FUZZ_RUNS=N make a run reproducible (libFuzzer's -seed and -runs: the
# same inputs in the same order on any machine). CI uses them so its verdict does not depend on
# luck. SECONDS_PER_TARGET is then only a cap: a target it stops before its N inputs fails, since
# a verdict on fewer inputs than asked is not the reproducible one (raise the cap, or lower N).
# QKV_FUZZ_RUNS_<name>=M (e.g. QKV_FUZZ_RUNS_bleu_tokenizers=50000) gives one target its own
# count instead of N, for a target too slow for N inputs in the cap.
# QKV_FUZZ_KEEP_GOING=1 keeps each target fuzzing for the whole time after a finding (libFuzzer's
# fork mode, one child at a time) and counts every saved finding.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build=${2:-build-fuzz}
targets=(safetensors config_json id_lines parallel_text utf8 bleu_tokenizers sentencepiece_load tokenizer_json
         npy train_state manifest serve_request)

for var in QKV_FUZZ_RUNS "${targets[@]/#/QKV_FUZZ_RUNS_}"; do
  [[ -z ${!var:-} || ${!var} =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: $var=${!var} is not a positive integer" >&2; exit 2; }
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: SECONDS_PER_TARGET=$seconds is not a positive integer" >&2; exit 2; }
jobs=${QKV_FUZZ_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: QKV_FUZZ_JOBS=$jobs is not a positive integer" >&2; exit 2; }

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  # A unity build (about 8 sources a unit) halves the CPU time of compiling the instrumented library.
  CC=clang CXX=clang++ cmake -S . -B "$build" -DQKV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON >/dev/null ||
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

# Prepares the scratch corpus of target $1 in $2: its checked-in seeds, and for SentencePiece
# the trained models. Fails (saying why on stderr) when a seed cannot be made: fuzzing without
# them would pass while testing far less than it claims.
prepare_corpus() {
  local name=$1 corpus=$2
  mkdir -p "$corpus" || return 1
  local seeds=(fuzz/corpus/"$name"/*)
  if [[ ! -e ${seeds[0]} ]]; then
    echo "fuzz $name: no seeds in fuzz/corpus/$name/ (rerun fuzz/make_corpus.py)" >&2
    return 1
  fi
  cp "${seeds[@]}" "$corpus"/ || { echo "fuzz $name: copying the seeds failed" >&2; return 1; }
  if [[ $name == sentencepiece_load ]]; then
    "$build/fuzz/fuzz_make_spm_seeds" "$corpus" >&2 ||
      { echo "fuzz $name: fuzz_make_spm_seeds failed (exit $?): no trained SentencePiece seeds" >&2; return 1; }
  fi
}

# Fuzzes target $1 and writes its report lines to $logs/$1.report; its exit status says whether it
# failed (a finding, too few inputs, or seeds that could not be made).
fuzz_target() {
  local name=$1 corpus="$scratch/corpus/$1" report="$logs/$1.report"
  : >"$report"
  if ! prepare_corpus "$name" "$corpus"; then
    echo "fuzz $name: FAILED: its seeds could not be made; not run" >>"$report"
    return 1
  fi
  local runs_var=QKV_FUZZ_RUNS_$name
  [[ -n ${!runs_var:-} ]] || runs_var=QKV_FUZZ_RUNS
  local runs=${!runs_var:-}
  local artifacts="$findings_root/$name"
  rm -rf "$artifacts" && mkdir -p "$artifacts" "$scratch/tmp/$name"
  local log="$logs/$name.log"
  local options=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                 -artifact_prefix="$artifacts/")
  [[ -f fuzz/$name.dict ]] && options+=(-dict="fuzz/$name.dict")
  [[ -n ${QKV_FUZZ_SEED:-} ]] && options+=(-seed="$QKV_FUZZ_SEED")
  [[ -n $runs ]] && options+=(-runs="$runs")
  # QKV_FUZZ_KEEP_GOING=1: fuzz the whole time even after findings (one child process at a time,
  # each finding saved), to count them over a long run instead of stopping at the first.
  [[ ${QKV_FUZZ_KEEP_GOING:-0} == 1 ]] && options+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  local start rc elapsed executions
  start=$(date +%s)
  OMP_NUM_THREADS=1 QKV_THREADS=1 QKV_FUZZ_SCRATCH="$scratch/tmp/$name" \
    "$build/fuzz/fuzz_$name" "${options[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ -z $executions ]]; then  # a crash ends the run before the final stats; fork mode has none
    executions=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  fi
  local reproducers=("$artifacts"/*)
  [[ -e ${reproducers[0]} ]] || reproducers=()
  local count=${#reproducers[@]} status=0
  if (( rc != 0 && count == 0 )); then count=1; fi  # died without saving an input: still a finding
  executions=${executions:-0}
  {
    echo "fuzz $name: $executions executions in $elapsed s, $count findings"
    if (( count == 0 )) && [[ -n $runs ]] && (( executions < runs )) && [[ ${QKV_FUZZ_KEEP_GOING:-0} != 1 ]]; then
      echo "fuzz $name: FAILED: ran $executions of the $runs inputs asked ($runs_var) before the" \
           "$seconds s cap stopped it; raise SECONDS_PER_TARGET or lower the runs"
      status=1
    fi
    if (( count > 0 )); then
      status=1
      for r in "${reproducers[@]:0:10}"; do echo "  reproducer: $r (replay: $build/fuzz/fuzz_$name $r)"; done
      (( count > 10 )) && echo "  ... and $((count - 10)) more in $artifacts/"
      # What went wrong, each distinct line once with its count (fork mode repeats them).
      grep -E 'SUMMARY: |runtime error|invariant failed|what\(\)|ERROR: libFuzzer' "$log" |
        sed -E 's/==[0-9]+==//; s/0x[0-9a-f]+/0x.../g' | sort | uniq -c | sort -rn | head -8 | sed 's/^/  /'
      echo "  log: $log"
    fi
  } >>"$report"
  return $status
}

# QKV_FUZZ_JOBS targets at a time (each is one process on one thread); the reports come out in the
# targets' order.
failed=()
for (( first = 0; first < ${#targets[@]}; first += jobs )); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for name in "${batch[@]}"; do
    fuzz_target "$name" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    wait "${pids[$i]}" || failed+=("${batch[$i]}")
    cat "$logs/${batch[$i]}.report"
  done
done
if (( ${#failed[@]} > 0 )); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
