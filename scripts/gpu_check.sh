#!/usr/bin/env bash
# The GPU checks, run on a machine with an NVIDIA GPU from the repository root, over the bundle
# that scripts/gpu_bundle.sh made of a -DQKV_CUDA=ON build (default .gpu/). Prints a summary and
# writes logs and gtest's JSON under $OUT (default /tmp/qkv-gpu). docs/gpu.md keeps the results.
# Narrower runs: QKV_SANITIZE=0 (no compute-sanitizer), QKV_SANITIZE_FILTER (memcheck's tests),
# QKV_SANITIZE_TOOLS (default "racecheck synccheck"), QKV_BENCH=0 (no benchmarks), QKV_BENCH_GPT=0
# (no GPT-2 small steps), QKV_BENCH_OPS=0 (no op-by-op timings), QKV_BIBLE=0 (no Bible recipe, which
# runs where data/bible came along), QKV_BENCH_SEED=0 (no seed or Bible model steps), QKV_BENCH_PRECISIONS (the
# training steps', default "float32 bf16"), QKV_PROFILE=0 (no Nsight Systems profile),
# QKV_RACECHECK_FILTER (the tests racecheck and synccheck run), QKV_NCU=0 (no Nsight Compute counters
# over attention's kernels).
# A time budget, QKV_CHECK_SECONDS (default 540: the device tool allows 600 s a command): a stage
# starts only if its own time limit still fits, else it is reported as skipped, so a short lease
# always brings back the tests' results. The stages run in that order of need: tests, the CLI, the server,
# data parallelism, memcheck, the Bible recipe, benchmarks, ncu over attention, racecheck and synccheck,
# the profile.
set -uo pipefail
bundle="${1:-.gpu}"
out="${OUT:-/tmp/qkv-gpu}"
mkdir -p "$out"
# What it prints also goes to $out/summary.txt; at the end the logs it wrote go into one archive,
# $out/logs.tar.gz (the device tool brings back a few files, not dozens; QKV_PACK_LOGS=0 leaves
# them loose). Only where $out was empty at the start: what is packed is then deleted.
pack_logs=${QKV_PACK_LOGS:-1}
[ -z "$(ls -A "$out")" ] || pack_logs=0
exec > >(tee "$out/summary.txt") 2>&1
tee_pid=$!
# The last lines reach summary.txt before the script ends: stdout closed, then tee waited for.
trap 'exec >&- 2>&-; wait "$tee_pid" 2>/dev/null' EXIT
if [ -f "$bundle/bundle.tar.xz" ]; then tar -C "$bundle" -xJf "$bundle/bundle.tar.xz"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
# The CUDA libraries: the toolkit's, or the pip wheels' next to PyTorch (NCCL, which qkv loads at
# run time for --allreduce nccl, too).
wheel_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null; }
cublas_dir=$(wheel_lib cublas)
nccl_dir=$(wheel_lib nccl)
export LD_LIBRARY_PATH="$PWD/$bundle/lib:/usr/local/cuda/lib64:${cublas_dir:-}:${nccl_dir:-}:${LD_LIBRARY_PATH:-}"
if ldd "$bundle/qkv_cuda_tests" | grep "not found"; then echo "missing libraries"; exit 1; fi
status=0
budget=${QKV_CHECK_SECONDS:-540}
skipped=()
fits() {  # fits STAGE SECONDS: whether a stage that may take SECONDS fits what is left of the budget
  local left=$(( budget - SECONDS ))
  [ "$left" -ge "$2" ] && return 0
  echo "== $1: skipped ($left s of the $budget s budget left; it may take $2 s)"
  skipped+=("$1")
  return 1
}
# Each group of tests writes its whole log first and is read afterwards: a pipe into `head` would
# end the tests by SIGPIPE once enough lines matched, and gtest's JSON with them.
run_tests() {  # run_tests NAME FILTER SECONDS
  local name=$1 filter=$2 limit=$3 rc
  fits "tests $name ($filter)" "$limit" || { status=1; return; }
  echo "== the GPU tests: $filter"
  timeout "$limit" "$bundle/qkv_cuda_tests" --gtest_filter="$filter" --gtest_output="json:$out/tests-$name.json" \
    > "$out/tests-$name.log" 2>&1
  rc=$?
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error|Expected|Which is|actual|cpu .* gpu" \
    "$out/tests-$name.log" | head -60
  [ "$rc" -ne 124 ] || echo "tests $name: stopped by the $limit s limit (the log ends where it stopped)"
  [ "$rc" -eq 0 ] || status=1
}
# Every op against the CPU, then whole models, then data parallelism (apart, so that a hang in NCCL's
# set-up costs its own minute only) and the Trainer resuming onto the GPU.
run_tests ops 'OpsOnGpu.*' 180
run_tests models 'ModelsOnGpu.*' 180
run_tests data-parallel 'DataParallelOnGpu.*' 60
run_tests trainer 'TrainerOnGpu.*' 45
if fits "the CLI on the GPU" 150; then
  echo "== qkv train --device cuda (the CLI, a synthetic copy task, a checkpoint written from the GPU)"
  timeout 60 "$bundle/qkv" train --synthetic --preset tiny --task copy --steps 300 --device cuda --output-dir "$out/copy-ckpt" \
    > "$out/copy-train.log" 2>&1 || status=1
  tail -4 "$out/copy-train.log"
  timeout 30 "$bundle/qkv" info "$out/copy-ckpt" > "$out/copy-info.log" 2>&1
  head -3 "$out/copy-info.log"
  # int8 on the GPU multiplies with the CPU's int8 arithmetic: the same translations, token for token.
  echo "== qkv translate --compute-type int8: the GPU's translations of the copy model against the CPU's"
  awk 'BEGIN { srand(7); for (i = 0; i < 40; ++i) { n = 3 + int(rand() * 8); s = "";
    for (j = 0; j < n; ++j) s = s (j ? " " : "") (4 + int(rand() * 6)); print s } }' > "$out/copy.ids"
  for device in cpu cuda; do
    timeout 30 "$bundle/qkv" translate --checkpoint "$out/copy-ckpt" --ids --input "$out/copy.ids" --beam-size 4 \
      --compute-type int8 --device $device > "$out/copy-int8-$device.out" 2> "$out/copy-int8-$device.log" || status=1
  done
  if cmp -s "$out/copy-int8-cpu.out" "$out/copy-int8-cuda.out" && [ -s "$out/copy-int8-cpu.out" ]; then
    echo "int8 translations: the GPU's equal the CPU's on $(wc -l < "$out/copy.ids") lines"
  else
    echo "int8 translations differ between the CPU and the GPU (or are empty):"
    diff "$out/copy-int8-cpu.out" "$out/copy-int8-cuda.out" | head -5
    tail -2 "$out/copy-int8-cuda.log"
    status=1
  fi
  rm -rf "$out/copy-ckpt"
fi
# qkv serve --device cuda under 16 concurrent clients (continuous batching and batched beam search on
# the GPU) against qkv generate / translate --device cuda, the CPU's answers reported beside them.
if fits "qkv serve --device cuda" 120; then
  echo "== qkv serve --device cuda: 16 clients' completions and translations against the CLI's; completions under --max-memory"
  timeout 120 python3 scripts/gpu_serve_check.py "$bundle/qkv" "$out/serve" > "$out/serve-check.log" 2>&1 || status=1
  tail -12 "$out/serve-check.log"
  rm -rf "$out/serve/lm" "$out/serve/mt"
fi
# Data parallelism with the model on the GPU: two ranks sharing it (their gradients summed through
# host memory) against one process whose micro-batches are a rank's share, as tests/mpi does on CPUs.
if ! command -v mpirun >/dev/null; then
  echo "== data parallelism on the GPU: no mpirun on this machine (tests/cuda checks the gradient buckets)"
elif ! ldd "$bundle/qkv" | grep libmpi >/dev/null; then
  echo "== data parallelism on the GPU: this qkv was built without MPI (-DQKV_MPI=OFF); build with it to check two ranks"
elif fits "data parallelism (mpirun)" 300; then
  echo "== mpirun -np 2 qkv train --device cuda:0 against one process with --micro-batch 4"
  dp=(train --synthetic --preset seed --task copy --vocab 40 --d-model 32 --heads 4 --layers 2 --d-ff 64 --batch-size 8
      --len 12 --dropout 0.1 --steps 10 --lr 1e-3 --clip-norm 1.0 --device cuda:0 --log-every 5)
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH "$bundle/qkv" "${dp[@]}" \
    --output-dir "$out/dp2" --allreduce-bucket-mb 0.01 > "$out/dp2.log" 2>&1
  dp2_status=$?
  timeout 120 "$bundle/qkv" "${dp[@]}" --output-dir "$out/dp1" --micro-batch 4 > "$out/dp1.log" 2>&1
  grep -E "data parallel|all-reduce|device" "$out/dp2.log"
  # This machine's mpirun may not be the Open MPI the bundle's libmpi came from: a failed launch is
  # reported, not counted; two runs that finish must agree.
  if [ "$dp2_status" -ne 0 ]; then
    echo "mpirun -np 2 exited $dp2_status:"
    tail -5 "$out/dp2.log"
  elif ! python3 - "$out/dp1/model.safetensors" "$out/dp2/model.safetensors" <<'PY'; then
import sys
sys.path.insert(0, "tests/python")
from safetensors_io import load  # the repository's own reader
one, two = load(sys.argv[1]), load(sys.argv[2])
scale = max(float(abs(t).max()) for t in one.values())
diff = max(float(abs(one[k] - two[k]).max()) for k in one)
print(f"weights after 10 steps, 2 ranks vs 1 process: max |difference| {diff:.3g} (largest weight {scale:.3g})")
# Not bits: the embedding's backward on a GPU sums repeated ids with atomicAdd (their order varies
# from run to run), and Adam turns a last-bit difference in a near-zero gradient into up to lr a
# step. 1e-4 of the largest weight (H200, 2026-11-30: 9.5e-5 of 3.96); a gradient lost or summed
# twice moves most weights by about lr (1e-3) a step.
sys.exit(0 if diff <= 1e-4 * scale else 1)
PY
    status=1
  fi
  rm -rf "$out/dp1" "$out/dp2"
  # NCCL needs a GPU per rank: two ranks sharing this one are refused by name, before NCCL is called.
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH "$bundle/qkv" "${dp[@]}" \
    --output-dir "$out/dp-nccl" --allreduce nccl > "$out/dp-nccl.log" 2>&1
  if grep -q "share GPU cuda:0" "$out/dp-nccl.log"; then
    echo "--allreduce nccl with two ranks on one GPU: refused by name"
  else
    echo "--allreduce nccl with two ranks on one GPU: not refused as expected:"
    tail -3 "$out/dp-nccl.log"
    [ "$dp2_status" -eq 0 ] && status=1
  fi
  rm -rf "$out/dp-nccl"
fi
sanitize=0
command -v compute-sanitizer >/dev/null && [ "${QKV_SANITIZE:-1}" = 1 ] && sanitize=1
# The op tests under memcheck (QKV_SANITIZE_FILTER narrows it).
if [ "$sanitize" = 1 ] && fits "compute-sanitizer memcheck" 180; then
  echo "== compute-sanitizer memcheck over the op tests"
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$bundle/qkv_cuda_tests" \
    --gtest_filter="${QKV_SANITIZE_FILTER:-OpsOnGpu.*:-*Exhausted*}" > "$out/memcheck.log" 2>&1
  echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log")"
  grep -E "Invalid|out of bounds" "$out/memcheck.log" | head -10
fi
# The Bible translation recipe (docs/runs.md's, float32: 2,543 steps of 6,000 tokens) trained on the
# GPU, where data/bible came with the check (the device tool's carry; scripts/prepare_bible_corpus.py
# makes it): the issue's "BLEU of the 2-hour CPU run in under 10 minutes" (30.30 on John). Then the
# model's translation speed on the GPU, float32, int8 and bf16 (bench_translate.py, qkv alone).
if [ -f data/bible/train.es ] && [ "${QKV_BIBLE:-1}" = 1 ] && fits "the Bible recipe" 350; then
  echo "== the Bible recipe on the GPU: training, John with beam 5, translation speed (beam 4, batches of 32)"
  recipe=(--src data/bible/train.es --tgt data/bible/train.en --valid-src data/bible/dev.es --valid-tgt data/bible/dev.en
          --spm-vocab 4000 --max-seq-length 160 --d-model 256 --heads 4 --layers 4 --d-ff 1024 --dropout 0.1
          --schedule linear --lr 1e-3 --warmup 800 --steps 2543 --label-smoothing 0.1 --clip-norm 1.0
          --max-batch-tokens 6000 --valid-every 300 --valid-bleu-sentences 300 --keep-checkpoints 3 --log-every 100
          --share-all-embeddings --device cuda)
  started=$SECONDS
  timeout 180 "$bundle/qkv" train "${recipe[@]}" --output-dir "$out/bible" > "$out/bible-train.log" 2>&1 || status=1
  echo "trained in $((SECONDS - started)) s (validations included); $(grep -E '^validation' "$out/bible-train.log" | tail -1)"
  timeout 60 "$bundle/qkv" translate --checkpoint "$out/bible/best" --input data/bible/test.es --beam-size 5 --device cuda \
    > "$out/bible-john.en" 2> "$out/bible-translate.log" || status=1
  echo "John ($(wc -l < data/bible/test.es) verses), the best checkpoint, beam 5: $("$bundle/qkv" bleu data/bible/test.en < "$out/bible-john.en" | head -1)"
  timeout 100 python3 bench/bench_translate.py --no-ct2 --bf16 --device cuda --qkv "$bundle/qkv" --checkpoint "$out/bible/best" \
    --input data/bible/test.es --ref data/bible/test.en --beam 4 --batch-size 32 --runs 3 --work "$out/bible-bench" \
    > "$out/bench_translate.log" 2>&1 || echo "bench_translate.py exited $?: $(tail -1 "$out/bench_translate.log")"
  grep -E "^(checkpoint|peer|qkv)" "$out/bench_translate.log"
  rm -rf "$out/bible" "$out/bible-bench"  # checkpoints: too large to bring back
fi
# GPT-2 small (124M) training steps on the GPU at batch 16 x 1024, the issue's shape: qkv against
# PyTorch eager with SDPA, steps alternating (bench_lm_train waits for each qkv step's queued work,
# as PyTorch's loss.item() after optimizer.step()): float32 against float32, then qkv's bf16
# precision against PyTorch's torch.autocast bf16.
bench_failed() {  # NAME EXIT_STATUS LIMIT: why a benchmark printed no result
  if [ "$2" -eq 124 ]; then echo "$1: did not finish within $3 s"; else
    echo "$1: exited $2:"; grep -vE "^\s" "$out/bench_$1.log" | tail -3; fi
}
bench_gpt() {  # NAME FLAGS...
  local name="$1"
  shift
  fits "$name" 150 || return 0
  echo "== $name"
  QKV_BENCH_DIR="$PWD/bench" timeout 150 "$bundle/bench_lm_train" --device cuda --attention sdpa --python python3 "$@" \
    > "$out/bench_$name.log" 2>&1 || bench_failed "$name" $? 150
  grep -E "^(GPT|qkv|pytorch|ratio)" "$out/bench_$name.log"
}
benches=0
[ "${QKV_BENCH:-1}" = 1 ] && benches=1
if [ -x "$bundle/bench_gpu_ops" ] && [ "$benches" = 1 ] && [ "${QKV_BENCH_OPS:-1}" = 1 ] && fits "bench_gpu_ops" 150; then
  echo "== a GPT-2 small step's ops one by one (bench_gpu_ops), and PyTorch's SDPA on the same attention"
  timeout 150 "$bundle/bench_gpu_ops" --python python3 > "$out/bench_gpu_ops.log" 2>&1
  grep -vE "^  (layernorm|gelu|residual|embedding)" "$out/bench_gpu_ops.log"
fi
gpt2="--steps 3 --batch 16 --block 1024 --layers 12 --d-model 768 --heads 12 --d-ff 3072 --vocab 50257 --dropout 0.0"
if [ -x "$bundle/bench_lm_train" ] && [ "$benches" = 1 ] && [ "${QKV_BENCH_GPT:-1}" = 1 ]; then
  for precision in ${QKV_BENCH_PRECISIONS:-float32 bf16}; do
    bench_gpt gpt2-124m-$precision $gpt2 --precision $precision
  done
fi
# Seed 000's encoder-decoder (its batch of 64 x 100 tokens) and the Bible model's (160 x 36) training
# steps on the GPU (issue 38), qkv against the seed's PyTorch model (the seed's attention: matmul,
# masked_fill, softmax, matmul), steps alternating and each qkv step waited for: float32 against
# float32, then qkv's bf16 precision against PyTorch's torch.autocast bf16.
bench_seed() {  # NAME FLAGS...
  local name="$1"
  shift
  fits "$name" 120 || return 0
  echo "== $name"
  QKV_BENCH_DIR="$PWD/bench" timeout 120 "$bundle/bench_train_step" --device cuda --python python3 "$@" \
    > "$out/bench_$name.log" 2>&1 || bench_failed "$name" $? 120
  grep -E "^(seed|bible|qkv|pytorch|memory|ratio)" "$out/bench_$name.log"
}
if [ -x "$bundle/bench_train_step" ] && [ "$benches" = 1 ] && [ "${QKV_BENCH_SEED:-1}" = 1 ]; then
  for precision in ${QKV_BENCH_PRECISIONS:-float32 bf16}; do
    bench_seed seed-$precision --steps 5 --precision $precision
    bench_seed bible-$precision --preset bible --steps 5 --precision $precision
  done
fi
# Why attention's kernels run below PyTorch's SDPA (bf16: forward 0.57 against 0.14 ms a GPT-2 small
# layer, 2026-11-28; float32 2.6x): Nsight Compute's counters over the flash kernels of one call each
# (bench_gpu_ops --only attention --reps 1: the float32 and mma.sync forms, not the WMMA one), where
# ncu can read them (Firecracker; not gVisor: KINDS.md). The stall reasons say what bounds them: the
# tensor pipes, shared memory, barriers, latency.
if [ -x "$bundle/bench_gpu_ops" ] && [ "$benches" = 1 ] && [ "${QKV_NCU:-1}" = 1 ] && command -v ncu > /dev/null &&
   fits "ncu over attention" 150; then
  echo "== attention's kernels under Nsight Compute (ncu)"
  stalls=""
  for reason in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected \
                lg_throttle dispatch_stall no_instruction branch_resolving; do
    stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio"
  done
  timeout 150 ncu --clock-control none --kernel-name 'regex:flash_(forward|backward)_(dq_|dkv_)?(mma_)?kernel' \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section InstructionStats --metrics "$stalls,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" \
    "$bundle/bench_gpu_ops" --only attention --reps 1 > "$out/ncu-attention.txt" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || echo "ncu exited $rc: $(grep -E '==ERROR==|==WARNING==' "$out/ncu-attention.txt" | head -3)"
  # A kernel's header line ("  void ...flash_forward_mma_kernel<64>(...) (3072, 1, 1)x(128, 1, 1), ..."),
  # then its figures.
  grep -E "^  [^ ].*_kernel.*\)x\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|hmma|stalled_.*_per_issue_active" \
    "$out/ncu-attention.txt" | sed -E -e 's/smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active.ratio/stalled \1/' \
    -e 's/^  .*(flash_[a-z_]+kernel(<[0-9]+>)?)\(.*\) \(([0-9, ]+)\)x\(([0-9, ]+)\).*/  \1 grid (\3) block (\4)/' |
    cut -c1-120 | head -200
fi
# racecheck (shared-memory races) and synccheck over the attention kernels, whose tiles pass
# through shared memory.
if [ "$sanitize" = 1 ]; then
  for tool in ${QKV_SANITIZE_TOOLS:-racecheck synccheck}; do
    # racecheck over every attention test took more than 90 s on an H200 (2026-11-30), synccheck less.
    limit=90
    [ "$tool" = racecheck ] && limit=180
    fits "compute-sanitizer $tool" $limit || continue
    timeout $limit compute-sanitizer --tool $tool --error-exitcode 9 "$bundle/qkv_cuda_tests" \
      --gtest_filter="${QKV_RACECHECK_FILTER:-OpsOnGpu.*Attention*}" > "$out/$tool.log" 2>&1
    rc=$?
    [ "$rc" -ne 124 ] || echo "$tool: stopped by its $limit s limit"
    echo "$tool exit $rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log")"
  done
fi
# Where a qkv GPT-2 small step's GPU time goes, by kernel (Nsight Systems, where the machine has it).
nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$nsys_bin" ] && [ -x "$bundle/bench_lm_train" ] && [ "$benches" = 1 ] && [ "${QKV_BENCH_GPT:-1}" = 1 ] &&
   [ "${QKV_PROFILE:-1}" = 1 ]; then
  for precision in float32 bf16; do
    fits "the profile ($precision)" 180 || continue
    echo "== where a qkv GPT-2 small step's GPU time goes (nsys, $precision)"
    QKV_BENCH_DIR="$PWD/bench" timeout 120 "$nsys_bin" profile -o "$out/profile-$precision" --force-overwrite true \
      "$bundle/bench_lm_train" --device cuda --no-torch $gpt2 --steps 2 --precision $precision > /dev/null 2>&1
    timeout 60 "$nsys_bin" stats --report cuda_gpu_kern_sum --format csv "$out/profile-$precision.nsys-rep" \
      > "$out/kernels-$precision.csv" 2>/dev/null
    python3 - "$out/kernels-$precision.csv" "$precision" <<'PY' || true
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
head, body = rows[0], rows[1:]
pct, total, name = head.index("Time (%)"), head.index("Total Time (ns)"), head.index("Name")
print(f"{sys.argv[2]}: top kernels of 2 steps (+ warm-up)")
for r in body[:12]:
    print(f"  {float(r[pct]):5.1f}%  {int(float(r[total])) / 1e6:9.1f} ms  {r[name][:110]}")
PY
    rm -f "$out/profile-$precision.nsys-rep" "$out/profile-$precision.sqlite"
  done
fi
echo "== done in $SECONDS s of the $budget s budget${skipped[*]:+; skipped: ${skipped[*]}}"
if [ "$pack_logs" = 1 ]; then
  (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name logs.tar.gz ! -name .packed -printf '%P\0' > .packed &&
   tar -czf logs.tar.gz --exclude='*.safetensors' --null -T .packed && xargs -0 rm -rf < .packed && rm -f .packed)
  echo "logs: $out/logs.tar.gz (tar -xzf it), this summary: $out/summary.txt"
fi
exit $status
