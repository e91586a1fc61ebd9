// The one training loop of qkv, for every model family and kind of data (synthetic ids, parallel
// text, language-model blocks): learning-rate schedule, gradient accumulation over micro-batches, clipping,
// periodic validation with `best`, `last` and kept step checkpoints, early stopping, step / epoch /
// wall-clock limits, a stop request, and exact resume.
//
// The library prints nothing and installs no signal handlers: progress goes to the callbacks in
// TrainerEvents, and a caller that wants Ctrl-C to stop training sets the atomic flag it passes in
// TrainerOptions::stop_flag from its own handler (a lock-free atomic store is async-signal-safe).
//
// Checkpoints are written all-or-nothing (io/checkpoint_dir.h). A step whose loss or gradient norm
// is NaN or infinite stops training with an error naming the step, before the optimizer touches
// the weights and without saving, so the last checkpoint on disk stays the last good one.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/dist/communicator.h"
#include "qkv/models/model.h"
#include "qkv/train/adam.h"
#include "qkv/train/grad_sync.h"
#include "qkv/train/train_state.h"
#include "qkv/train/training_data.h"

namespace qkv::train {

struct TrainerOptions {
  Hyper hyper;
  std::string last_dir;  // the checkpoint a resume continues from ("" : never saved)
  std::string best_dir;  // written when validation improves, and at the end if never written ("" : none)
  std::string run_dir;   // parent of kept step checkpoints RUN/step-NNNNNNN
  int64_t keep_checkpoints = 0;  // keep the weights of the last N validations (for `qkv average`)
  // Files copied into every checkpoint: (name in the checkpoint, source path), e.g. tokenizers.
  std::vector<std::pair<std::string, std::string>> extra_files;
  int64_t max_steps = 0;   // 0: no limit
  int64_t max_epochs = 0;  // 0: no limit
  double time_budget = 0;  // seconds of training, earlier runs included (0: no limit)
  int64_t valid_every = 0;  // validate (if there is a validator) and save last every N steps (0: never)
  int64_t save_every = 0;   // also save last every N steps (0: only at validations and at the end)
  int64_t patience = 0;     // stop after this many validations without a better score (0: never)
  int64_t log_every = 1;    // on_log every N steps (and at the last step)
  // Training that ends between validations (limit reached) is validated once more, so best/
  // considers the final weights. Never after a stop request: that should exit promptly.
  bool validate_at_end = true;
  const std::atomic<bool>* stop_flag = nullptr;  // set by the caller (e.g. a SIGINT handler)

  // Data parallelism (dist/communicator.h; nullptr: one process). Every rank runs a Trainer on the
  // same model, data and options. Each takes rows [r*s, (r+1)*s) of every batch (s = ceil(rows /
  // ranks)) in chunks of hyper.micro_batch rows (or as hyper.max_memory allows), gradients are summed over the ranks (buckets of
  // bucket_bytes, started during backward when overlap is on), and every rank applies the same
  // update. Rank 0 alone validates (the others wait for its result), writes checkpoints and calls
  // on_save; a stop request or time budget on any rank stops all at the same step.
  dist::Communicator* comm = nullptr;
  int64_t bucket_bytes = 25 << 20;
  bool overlap = true;
  // The sums on the GPUs through NCCL (dist/nccl.h), each rank on a GPU of its own, instead of
  // through host memory over `comm` (which still carries everything else).
  bool nccl = false;
  // Where training runs: the Trainer moves the model there (models::Model::to) before it makes the
  // optimizer, whose moments then live there too. Batches are moved as they are used.
  Device device = Device::cpu();
};

struct ValidationResult {
  double loss = 0;
  double bleu = -1;      // -1: not computed
  double accuracy = -1;  // masked LM (of the chosen positions) and classification; -1: not computed
  double macro_f1 = -1;  // classification: the mean F1 over the labels; -1: not computed
  // Classification: the labels and the dev confusion counts (confusion[gold][predicted], labels x
  // labels), logged in metrics.jsonl for `qkv plot`; empty otherwise. Rank 0's alone in a
  // multi-rank run (the one that logs).
  std::vector<std::string> labels;
  std::vector<std::vector<int64_t>> confusion;
  // What `best` maximises: BLEU when computed, else macro-F1 when computed, else -loss.
  double score() const { return bleu >= 0 ? bleu : macro_f1 >= 0 ? macro_f1 : -loss; }
  double perplexity() const { return std::exp(loss); }  // loss is the mean per-token cross-entropy
};
// A validator calls `after_batch` after each batch it runs: on rank 0 of a multi-rank run that
// tells the ranks waiting for its result that validation is still going (dist::Communicator's
// signal_alive), so a long validation is never mistaken for a hung rank.
using AfterBatch = std::function<void()>;
using Validator = std::function<ValidationResult(const models::Model&, const AfterBatch& after_batch)>;

struct StepReport {
  int64_t step = 0, max_steps = 0, epoch = 0;  // epoch counts from 1
  double loss = 0;                             // mean over the steps since the last report
  double lr = 0, grad_norm = 0, tokens_per_second = 0;
  int64_t tokens = 0;  // target tokens since the last report
  double elapsed = 0;  // training seconds, earlier runs included
  double eta = -1;     // seconds, -1 when unknown
};
struct ValidationReport {
  int64_t step = 0;
  ValidationResult result;
  bool best = false;
  double elapsed = 0;  // training seconds when validated, earlier runs included
};
struct TrainerEvents {
  std::function<void(const StepReport&)> on_log;
  std::function<void(const ValidationReport&)> on_validation;
  std::function<void(const std::string& dir, int64_t step)> on_save;
  std::function<void(const std::string& message)> on_info;  // one-off facts: data read, vocabulary built
};

struct TrainResult {
  int64_t step = 0;
  double elapsed = 0;
  // Data parallelism: seconds spent summing gradients over the ranks after backward (the part not
  // hidden behind it), gradient bytes all-reduced per step, buckets started during backward.
  double allreduce_seconds = 0;
  int64_t allreduce_bytes = 0;
  int64_t buckets_in_backward = 0, buckets = 0;
  int64_t steps_run = 0;  // steps this run() took (a resumed run's earlier ones not included)
  std::string stop_reason;  // "reached --steps", "time budget used", "interrupted", ...
  bool interrupted = false;
};

// Throws qkv::Error naming the flag of the first setting out of range (also checked by Trainer;
// callers with expensive preparation check first).
void check_hyper(const Hyper& hyper);
// A linear or cosine schedule needs its last step, or a time budget to fit it to.
void check_schedule_end(const Schedule& schedule, double time_budget_seconds);

class Trainer {
 public:
  // The model and the data outlive the Trainer. The model is put in training mode.
  Trainer(models::Model& model, TrainingData& data, TrainerOptions options, Validator validator = {});
  // Continues from `checkpoint_dir` (written by a Trainer or by qkv 0.1): optimizer moments, dropout
  // RNG, data position, step, best score, elapsed time. The model's weights must already be that
  // checkpoint's (models::load_model). Refuses a mixed set: a manifest that does not match the
  // files, or optimizer and training state from different steps.
  void resume(const std::string& checkpoint_dir, const TrainState& state);
  TrainResult run(const TrainerEvents& events = {});
  void request_stop() { stop_.store(true); }
  int64_t step() const { return state_.step; }
  int rank() const { return comm_->rank(); }
  const Adam& optimizer() const { return optimizer_; }
  // Writes last_dir now (model, optimizer, state, extra files).
  void save_last(const TrainerEvents& events = {});

 private:
  bool stop_requested() const;
  bool writes() const { return comm_->rank() == 0; }
  void check_ranks_agree();
  std::string limit_reached(double elapsed) const;
  void fit_schedule_to_budget(double clock, const TrainerEvents& events);
  int64_t micro_batch_rows(const data::Batch& batch, int64_t rows, const TrainerEvents& events);
  void train_one_step(double& loss, int64_t& tokens, double& lr, double& norm, const TrainerEvents& events);
  void validate(const TrainerEvents& events);
  void check_weights_finite() const;
  void save_weights_only(const std::string& dir, const TrainerEvents& events);
  void keep_step_checkpoint(const TrainerEvents& events);

  models::Model& model_;
  TrainingData& data_;
  TrainerOptions options_;
  Validator validator_;
  Adam optimizer_;
  dist::Communicator* comm_;
  std::unique_ptr<dist::NcclGroup> nccl_;     // options.nccl, from the first step on (outlives reducer_'s use)
  std::unique_ptr<GradientReducer> reducer_;  // more than one rank
  TrainState state_;
  double elapsed_before_ = 0;
  double elapsed_now_ = 0;
  int64_t last_validated_ = -1;
  int64_t parameters_ = 0;               // the model's parameter count, for the memory estimate
  int ranks_on_device_ = 1;              // ranks training on this rank's GPU (this one included)
  bool reported_micro_batches_ = false;  // the automatic micro-batch choice is reported once a run
  std::atomic<bool> stop_{false};
};

}  // namespace qkv::train
