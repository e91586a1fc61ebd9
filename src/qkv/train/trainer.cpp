#include "qkv/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>
#include <zlib.h>

#include "qkv/core/cuda_runtime.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/ops/precision.h"
#include "qkv/train/clip.h"
#include "qkv/train/memory_budget.h"
#include "qkv/train/step.h"

namespace qkv::train {
namespace fs = std::filesystem;

void check_schedule_end(const Schedule& s, double time_budget) {
  QKV_CHECK(!schedule_needs_total_steps(s.kind) || s.total_steps > 0 || time_budget > 0,
            "the " << s.kind << " schedule falls to 0 at the run's last step: give --steps, or --time-budget "
                              "for the steps that fit it");
}

void check_hyper(const Hyper& h) {
  check_schedule(h.schedule);
  QKV_CHECK(std::isfinite(h.clip_norm) && h.clip_norm >= 0,
            "--clip-norm must be a finite number >= 0 (0: off), got " << h.clip_norm);
  QKV_CHECK(h.label_smoothing >= 0 && h.label_smoothing < 1, "--label-smoothing must be in [0, 1), got " << h.label_smoothing);
  QKV_CHECK(h.optimizer == "adam" || h.optimizer == "adamw", "--optimizer must be adam or adamw, got " << h.optimizer);
  QKV_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0 && h.weight_decay < 1,
            "--weight-decay must be in [0, 1), got " << h.weight_decay);
  QKV_CHECK(h.weight_decay == 0 || h.optimizer == "adamw",
            "--weight-decay needs --optimizer adamw (Adam's L2 penalty is not offered)");
  ops::parse_precision(h.precision);  // throws naming the accepted ones
  QKV_CHECK(h.micro_batch >= 0, "--micro-batch must be >= 0 (0: whole batch), got " << h.micro_batch);
  QKV_CHECK(h.max_memory >= 0 || h.max_memory == kAutoMemory,
            "--max-memory must be a size >= 0 (0: no limit) or auto, got " << h.max_memory);
}

namespace {
void check_options(const TrainerOptions& o) {
  check_hyper(o.hyper);
  check_schedule_end(o.hyper.schedule, o.time_budget);
  QKV_CHECK(o.max_steps >= 0 && o.max_epochs >= 0 && o.time_budget >= 0, "training limits must be >= 0");
  QKV_CHECK(o.valid_every >= 0 && o.save_every >= 0, "--valid-every and --save-every must be >= 0");
  QKV_CHECK(o.log_every > 0, "--log-every must be positive, got " << o.log_every);
  QKV_CHECK(o.patience >= 0 && o.keep_checkpoints >= 0, "--patience and --keep-checkpoints must be >= 0");
}

std::string format_seconds_per_step(double seconds, int64_t steps) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", seconds / static_cast<double>(std::max<int64_t>(1, steps)));
  return text;
}

// The optimizer's own step counter (saved in optimizer.safetensors) must equal train_state's step:
// a difference means the two files come from different saves.
int64_t saved_optimizer_step(const std::string& path) {
  const io::TensorFile f = io::load_tensors(path);
  try {
    return std::stoll(f.metadata_value("step"));
  } catch (const std::exception&) {
    throw Error(path + ": optimizer metadata \"step\" is not an integer");
  }
}

// "micro-batches of 32 rows (2 chunks of the 64-row batch at step 1) to stay under --max-memory auto
// (2.47 GiB): estimate 2.31 GiB, whole batch 3.36 GiB; ...", or that not even one row fits.
std::string plan_message(const MicroBatchPlan& plan, int64_t batch_rows, int64_t max_memory, int64_t whole_bytes,
                         int64_t step) {
  const std::string budget = "--max-memory " + format_memory_size(max_memory) +
                             (max_memory == kAutoMemory ? " (" + format_bytes(plan.budget_bytes) + ")" : "");
  if (!plan.fits)
    return "even one row is estimated at " + format_bytes(plan.estimate.total()) + ", over " + budget +
           ": running one row at a time; raise --max-memory";
  return "micro-batches of " + std::to_string(plan.rows) + " rows (" + std::to_string(plan.chunks) + " chunks of the " +
         std::to_string(batch_rows) + "-row batch at step " + std::to_string(step) + ") to stay under " + budget +
         ": estimate " + format_bytes(plan.estimate.total()) + ", whole batch " + format_bytes(whole_bytes) +
         "; --micro-batch ROWS or --max-memory 0 to choose otherwise";
}
}  // namespace

namespace {
models::Model& placed_on(models::Model& model, Device device) {
  if (model.device() != device) model.to(device);
  return model;
}
}  // namespace

Trainer::Trainer(models::Model& model, TrainingData& data, TrainerOptions options, Validator validator)
    : model_(placed_on(model, options.device)),
      data_(data),
      options_(std::move(options)),
      validator_(std::move(validator)),
      optimizer_(model.named_parameters(),
                 AdamOptions{options_.hyper.schedule.lr, options_.hyper.beta1, options_.hyper.beta2, options_.hyper.eps,
                             options_.hyper.weight_decay, options_.hyper.optimizer == "adamw"}),
      comm_(options_.comm ? options_.comm : &dist::single_process()) {
  check_options(options_);
  QKV_CHECK(options_.bucket_bytes > 0, "the all-reduce bucket size must be positive, got " << options_.bucket_bytes);
  QKV_CHECK(!options_.nccl || options_.device.is_cuda(),
            "--allreduce nccl sums gradients on GPUs: it needs --device cuda, not " << options_.device.name());
  if (comm_->size() > 1)
    reducer_ = std::make_unique<GradientReducer>(model_.parameters(), *comm_, options_.bucket_bytes, options_.overlap);
  model_.train();
  state_.kind = data_.kind();
  state_.hyper = options_.hyper;
  state_.has_hyper = true;
  state_.gen_seed = model_.generator().seed();
  state_.gen_offset = model_.generator().offset();
  for (const Var& p : model_.parameters()) parameters_ += p.value().numel();
}

void Trainer::resume(const std::string& dir, const TrainState& saved) {
  const io::ManifestCheck manifest = io::verify_manifest(dir);
  QKV_CHECK(saved.kind == data_.kind(), dir << "/train_state.json: a " << saved.kind << " run cannot continue as "
                                            << data_.kind() << " training");
  QKV_CHECK(!manifest.has_manifest || manifest.step < 0 || manifest.step == saved.step,
            dir << ": manifest.json is of step " << manifest.step << " but train_state.json of step " << saved.step
                << ": mixed checkpoint");
  const std::string opt_path = dir + "/optimizer.safetensors";
  const int64_t opt_step = saved_optimizer_step(opt_path);
  QKV_CHECK(opt_step == saved.step, dir << ": optimizer.safetensors is of step " << opt_step
                                        << " but train_state.json of step " << saved.step
                                        << ": mixed checkpoint (files from different saves); resume from another copy");
  optimizer_.load(opt_path);
  // The rate of the last step taken (saved with the moments), so a resume that takes no step saves
  // the same optimizer file as the run it continues.
  if (saved.step > 0) optimizer_.set_lr(options_.hyper.schedule.at(saved.step));
  model_.generator().set_state(saved.gen_seed, saved.gen_offset);
  data_.restore(saved.data, saved.step);
  state_ = saved;
  state_.kind = data_.kind();
  state_.hyper = options_.hyper;  // the caller decides (saved values unless overridden)
  state_.has_hyper = true;
  elapsed_before_ = saved.elapsed;
  elapsed_now_ = saved.elapsed;
  last_validated_ = -1;
}

namespace {
// This host's name as a number (its CRC-32, which a double holds exactly): which ranks share a
// host, and so the GPU of an index.
double host_id() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return 0;
  return static_cast<double>(crc32(0L, reinterpret_cast<const Bytef*>(name), static_cast<uInt>(std::strlen(name))));
}
}  // namespace

// Before the first step: every rank must hold the same weights, optimizer step and data position
// (the same checkpoint, config and seed), else they would silently train different models. Also
// counts the ranks that train on this rank's GPU (same host, same device), whose automatic memory
// budgets share it.
void Trainer::check_ranks_agree() {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const Var& p : model_.parameters()) {
    const Tensor host = p.value().to(Device::cpu());
    crc = crc32(crc, reinterpret_cast<const Bytef*>(host.f32()), static_cast<uInt>(host.numel() * 4));
  }
  const std::string data = data_.state().dump();
  crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()));
  const double device = options_.device.is_cuda() ? options_.device.index : -1;
  constexpr int kValues = 5;
  const std::vector<double> all = comm_->gather({static_cast<double>(crc), static_cast<double>(state_.step),
                                                 static_cast<double>(optimizer_.steps()), host_id(), device},
                                                "the start of training");
  for (int r = 1; r < comm_->size(); ++r)
    QKV_CHECK(all[kValues * r] == all[0] && all[kValues * r + 1] == all[1] && all[kValues * r + 2] == all[2],
              "rank " << r << " starts from other weights, step or data position than rank 0 (step "
                      << all[kValues * r + 1] << " vs " << all[1]
                      << "): every rank must read the same checkpoint, config, data and seed");
  std::vector<RankPlacement> placements;
  for (int r = 0; r < comm_->size(); ++r) placements.push_back({all[kValues * r + 3], all[kValues * r + 4]});
  ranks_on_device_ = ranks_on_same_gpu(placements, comm_->rank());
  if (options_.nccl && !nccl_) {  // every rank decides alike: the placements are the same everywhere
    check_gpu_per_rank(placements);
    nccl_ = std::make_unique<dist::NcclGroup>(*comm_, options_.device);
    reducer_->sum_on_device(nccl_.get());
  }
}

bool Trainer::stop_requested() const {
  return stop_.load() || (options_.stop_flag && options_.stop_flag->load());
}

std::string Trainer::limit_reached(double elapsed) const {
  if (options_.max_steps > 0 && state_.step >= options_.max_steps) return "reached --steps";
  const Schedule& schedule = options_.hyper.schedule;
  if (schedule_needs_total_steps(schedule.kind) && schedule.total_steps > 0 && state_.step >= schedule.total_steps)
    return "reached the end of the " + schedule.kind + " schedule";
  if (options_.max_epochs > 0 && data_.epoch() >= options_.max_epochs) return "reached --max-epochs";
  if (options_.time_budget > 0 && elapsed >= options_.time_budget) {
    const Schedule& s = options_.hyper.schedule;
    if (schedule_needs_total_steps(s.kind) && state_.step < s.total_steps)  // the run ends un-annealed
      return "time budget used (the " + s.kind + " schedule ends at step " + std::to_string(s.total_steps) +
             ": its rate had not reached 0; a smaller --steps fits the whole schedule in the budget)";
    return "time budget used";
  }
  return "";
}

// A linear or cosine schedule without --steps ends where the time budget does: at the end of the
// warm-up (which does not depend on it) the pace so far fixes the last step. It is saved with the
// run, so a resume after this point follows the same line; every rank sees the same clock (the
// slowest), so all choose alike.
void Trainer::fit_schedule_to_budget(double clock, const TrainerEvents& events) {
  Schedule& schedule = options_.hyper.schedule;
  if (!schedule_needs_total_steps(schedule.kind) || schedule.total_steps > 0 || state_.step < schedule.warmup) return;
  schedule.total_steps = steps_that_fit(state_.step, clock, options_.time_budget, schedule.warmup);
  state_.hyper.schedule.total_steps = schedule.total_steps;
  if (events.on_info)
    events.on_info("the " + schedule.kind + " schedule falls to 0 at step " + std::to_string(schedule.total_steps) +
                   ": the steps that fit the time budget at " + format_seconds_per_step(clock, state_.step) +
                   " a step so far");
}

// The rows per chunk for this rank's `rows` of `batch`: --micro-batch when given, else what
// --max-memory allows (a function of the saved settings and the batch's shape only, and on a GPU of
// its memory size, so a resumed run chunks as the uninterrupted one did). It plans as if --recompute-ffn were off: that flag is not
// part of a checkpoint, and a resume without it must chunk alike (with it, the estimate is high).
// The first batch that is split (or cannot fit) is reported once.
int64_t Trainer::micro_batch_rows(const data::Batch& batch, int64_t rows, const TrainerEvents& events) {
  const Hyper& h = options_.hyper;
  if (h.micro_batch > 0 || h.max_memory == 0) return h.micro_batch;
  StepShape shape = data_.objective().step_shape(model_, batch);
  if (rows < shape.rows) {  // a rank's share: its part of the outputs too
    shape.outputs = (shape.outputs * rows + shape.rows - 1) / shape.rows;
    shape.rows = rows;
  }
  constexpr bool kPlanWithFfnSaved = false;  // see above
  // On a GPU the automatic budget is a share of its memory: ranks that train on the same GPU split it.
  const int64_t max_memory =
      options_.device.is_cuda()
          ? max_memory_on_gpu(h.max_memory, static_cast<int64_t>(cuda::memory_info(options_.device).total),
                              ranks_on_device_)
          : h.max_memory;
  const MicroBatchPlan plan = plan_micro_batches(model_.config(), parameters_, kPlanWithFfnSaved, shape, max_memory);
  if (plan.rows > 0 && !reported_micro_batches_ && events.on_info) {
    reported_micro_batches_ = true;
    const MemoryEstimate whole = estimate_step_memory(model_.config(), parameters_, kPlanWithFfnSaved, shape, shape.rows);
    events.on_info(plan_message(plan, shape.rows, h.max_memory, whole.total(), state_.step + 1));
  }
  return plan.rows;
}

void Trainer::train_one_step(double& loss, int64_t& tokens, double& lr, double& norm, const TrainerEvents& events) {
  const data::Batch batch = data_.next();
  lr = options_.hyper.schedule.at(state_.step + 1);
  optimizer_.set_lr(lr);
  optimizer_.zero_grad();
  StepOptions so;
  so.label_smoothing = options_.hyper.label_smoothing;
  const int64_t B = batch.tgt.size(0);
  if (reducer_) {  // this rank's share of the rows
    const int64_t P = comm_->size();
    const int64_t share = (B + P - 1) / P;
    so.row_begin = std::min(B, comm_->rank() * share);
    so.row_end = std::min(B, so.row_begin + share);
    so.reducer = reducer_.get();
  }
  // Every rank plans for the largest share, so all chunk alike.
  const int64_t P = comm_->size();
  so.micro_batch_rows = micro_batch_rows(batch, reducer_ ? (B + P - 1) / P : B, events);
  const StepResult r = forward_backward(model_, data_.objective(), batch, so);
  norm = clip_grad_norm(model_.parameters(), options_.hyper.clip_norm);
  // Diverged: stop before the update, so neither the weights in memory nor any checkpoint see it.
  QKV_CHECK(std::isfinite(r.loss) && std::isfinite(norm),
            "step " << state_.step + 1 << ": the loss is " << r.loss << " and the gradient norm " << norm
                    << "; training stopped without saving (the last checkpoint"
                    << (options_.last_dir.empty() ? "" : ", " + options_.last_dir + ",")
                    << " is unchanged). Lower --lr, raise --warmup or use --clip-norm");
  optimizer_.step();
  ++state_.step;
  loss += r.loss;
  tokens += r.target_tokens;
}

TrainResult Trainer::run(const TrainerEvents& events) {
  // Steps and the validation loss multiply in the run's precision (the loss training sees); the
  // validation search packs float32 weights, as `qkv translate` does by default.
  const ops::ProductPrecisionScope precision(ops::parse_precision(options_.hyper.precision));
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    elapsed_now_ = elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return elapsed_now_;
  };
  TrainResult result;
  double window_loss = 0, window_start = elapsed(), lr = 0, norm = 0;
  int64_t window_tokens = 0, window_steps = 0;
  if (comm_->size() > 1) {
    dist::check_all_ranks(*comm_, "");  // every rank got here (see run_training for the others)
    check_ranks_agree();
  }
  try {
  while (true) {
    double clock = elapsed();
    bool stop = stop_requested();
    if (comm_->size() > 1) {
      // One heartbeat per step: every rank's stop request and clock, so all stop at the same step
      // (time budget by the slowest clock); a rank that died or hangs is named past the timeout.
      const std::vector<double> all =
          comm_->gather({stop ? 1.0 : 0.0, clock}, "the start of step " + std::to_string(state_.step + 1));
      for (size_t i = 0; i < all.size(); i += 2) {
        stop = stop || all[i] != 0;
        clock = std::max(clock, all[i + 1]);
      }
    }
    fit_schedule_to_budget(clock, events);
    result.stop_reason = limit_reached(clock);
    if (!result.stop_reason.empty()) break;
    if (stop) {
      result.stop_reason = "interrupted";
      result.interrupted = true;
      break;
    }
    train_one_step(window_loss, window_tokens, lr, norm, events);
    ++window_steps;
    const bool last_step = options_.max_steps > 0 && state_.step == options_.max_steps;
    if (state_.step % options_.log_every == 0 || last_step) {
      const double now = elapsed();
      StepReport r;
      r.step = state_.step;
      r.max_steps = options_.max_steps;
      r.epoch = data_.epoch() + 1;
      r.loss = window_loss / static_cast<double>(window_steps);
      r.lr = lr;
      r.grad_norm = norm;
      r.tokens = window_tokens;
      r.tokens_per_second = window_tokens / std::max(1e-9, now - window_start);
      if (options_.max_steps > 0)
        r.eta = static_cast<double>(options_.max_steps - state_.step) * (now - window_start) / window_steps;
      if (options_.time_budget > 0) r.eta = std::max(0.0, options_.time_budget - now);
      r.elapsed = now;
      if (events.on_log) events.on_log(r);
      window_loss = 0;
      window_tokens = window_steps = 0;
      window_start = now;
    }
    const bool validate_now = options_.valid_every > 0 && state_.step % options_.valid_every == 0;
    if (validate_now && validator_) validate(events);
    if (validate_now || (options_.save_every > 0 && state_.step % options_.save_every == 0)) save_last(events);
    if (validate_now && validator_ && options_.patience > 0 && state_.bad_validations >= options_.patience) {
      result.stop_reason = "early stopping (no improvement in " + std::to_string(options_.patience) + " validations)";
      break;
    }
  }
  if (!result.interrupted && validator_ && options_.validate_at_end && last_validated_ != state_.step && state_.step > 0)
    validate(events);
  save_last(events);
  if (writes() && !options_.best_dir.empty() && !fs::exists(options_.best_dir + "/model.safetensors"))
    save_weights_only(options_.best_dir, events);
  } catch (const std::exception& e) {
    // The other ranks may be waiting for this one in a collective: only ending the job helps.
    if (comm_->size() > 1) {  // the communicator's own messages already start with "rank R: "
      const std::string prefix = "rank " + std::to_string(comm_->rank()) + ": ", what = e.what();
      throw dist::RankFailure(what.rfind(prefix, 0) == 0 ? what : prefix + what);
    }
    throw;
  }
  result.step = state_.step;
  result.elapsed = elapsed();
  if (reducer_) {
    const GradientReducer::Stats& s = reducer_->stats();
    result.allreduce_seconds = s.wait_seconds;
    result.allreduce_bytes = s.bytes;
    result.buckets = s.buckets;
    result.buckets_in_backward = s.started_in_backward;
    result.steps_run = s.steps;
  }
  return result;
}

void Trainer::validate(const TrainerEvents& events) {
  ValidationResult v;
  if (writes()) {
    model_.eval();
    v = validator_(model_, [this] { comm_->signal_alive(); });
    model_.train();
  }
  if (comm_->size() > 1) {  // rank 0's result, however long validation takes while it signals
    double r[4] = {v.loss, v.bleu, v.accuracy, v.macro_f1};
    comm_->broadcast_from_busy(r, sizeof r, 0, "validation at step " + std::to_string(state_.step));
    // Only the scores travel: rank 0, the one that logs, keeps its labels and confusion counts.
    v.loss = r[0];
    v.bleu = r[1];
    v.accuracy = r[2];
    v.macro_f1 = r[3];
  }
  last_validated_ = state_.step;
  const bool better = v.score() > state_.best;
  if (better) {
    state_.best = v.score();
    state_.bad_validations = 0;
    if (!options_.best_dir.empty()) save_weights_only(options_.best_dir, events);
  } else {
    ++state_.bad_validations;
  }
  keep_step_checkpoint(events);
  if (events.on_validation) events.on_validation({state_.step, v, better, elapsed_now_});
}

void Trainer::check_weights_finite() const {
  const std::string bad = models::first_non_finite_parameter(model_);
  QKV_CHECK(bad.empty(), "step " << state_.step << ": the update made '" << bad
                                 << "' NaN or infinite; training stopped without saving (the last checkpoint"
                                 << (options_.last_dir.empty() ? "" : ", " + options_.last_dir + ",")
                                 << " is unchanged). Lower --lr, raise --warmup or use --clip-norm");
}

void Trainer::save_weights_only(const std::string& dir, const TrainerEvents& events) {
  check_weights_finite();
  if (!writes()) return;
  io::StagedDirectory staged(dir);
  models::write_model_files(staged, model_, state_.step);
  for (const auto& [name, source] : options_.extra_files) staged.copy_from(name, source);
  staged.commit(state_.step);
  if (events.on_save) events.on_save(dir, state_.step);
}

void Trainer::save_last(const TrainerEvents& events) {
  if (options_.last_dir.empty()) return;
  check_weights_finite();
  if (!writes()) return;
  state_.gen_seed = model_.generator().seed();
  state_.gen_offset = model_.generator().offset();
  state_.data = data_.state();
  state_.elapsed = elapsed_now_;
  io::StagedDirectory staged(options_.last_dir);
  models::write_model_files(staged, model_, state_.step);
  optimizer_.save(staged.path("optimizer.safetensors"));
  staged.write("train_state.json", train_state_to_json(state_));
  for (const auto& [name, source] : options_.extra_files) staged.copy_from(name, source);
  staged.commit(state_.step);
  if (events.on_save) events.on_save(options_.last_dir, state_.step);
}

// RUN/step-NNNNNNN for `qkv average`: written after a validation; the oldest beyond
// keep_checkpoints are deleted (zero-padded names sort by step).
void Trainer::keep_step_checkpoint(const TrainerEvents& events) {
  if (!writes() || options_.keep_checkpoints <= 0 || options_.run_dir.empty()) return;
  char name[32];
  std::snprintf(name, sizeof name, "step-%07lld", static_cast<long long>(state_.step));
  save_weights_only(options_.run_dir + "/" + name, events);
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(options_.run_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() == 12 && n.rfind("step-", 0) == 0) kept.push_back(n);
  }
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + static_cast<size_t>(options_.keep_checkpoints) < kept.size(); ++i)
    fs::remove_all(options_.run_dir + "/" + kept[i]);
}

}  // namespace qkv::train
