// One training run as `qkv train` describes it, callable from any front end (the CLI, the Python
// module): a TrainRequest holds what the command-line flags say (an unset optional is a flag not
// given), and run_training picks the run it asks for (synthetic ids, translation, decoder-only
// language model, masked-LM pretraining or classification), prepares it and runs the one Trainer.
//
// The library prints nothing: one-off facts (vocabulary built, a flag that overrides a resumed
// run's setting) go to TrainerEvents::on_info, progress to on_log and on_validation. Text runs
// also append every report to OUT/metrics.jsonl (train/metrics_log.h). Messages name the CLI
// flags (`--lr`), the names every front end documents.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/models/config.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

struct TrainRequest {
  // Synthetic ids (seed 000's example and a copy task).
  bool synthetic = false;
  std::string preset, task;  // preset "" : synthetic runs take "seed", text runs their family's defaults
  std::optional<int64_t> batch, len, vocab;
  // Model (flags override --config, or the family's defaults).
  std::string config_path;
  std::optional<int64_t> d_model, heads, layers, d_ff, max_len;
  std::optional<float> dropout;
  // Encoder-decoder: one embedding matrix for the source, the target and the output layer
  // (config share_embeddings and tie_output_embedding), as fairseq's --share-all-embeddings.
  bool share_all_embeddings = false;
  // Optimisation (a resumed run keeps the saved values unless one is given).
  std::optional<int64_t> steps, warmup, micro_batch;
  std::optional<float> label_smoothing;
  std::optional<double> lr, clip_norm, weight_decay;
  std::optional<std::string> schedule, optimizer;
  std::optional<std::string> precision;  // "float32" or "bf16" (Hyper::precision)
  // --max-memory as written ("2G", "1500M", "0", "auto"; train/memory_budget.h); unset: the saved
  // run's budget when resuming, else auto.
  std::optional<std::string> max_memory;
  bool recompute_ffn = false;
  uint64_t seed = 0;
  // The run.
  std::string out, resume, metrics;  // metrics: metrics.jsonl path ("": OUT/metrics.jsonl for text runs)
  int64_t save_every = 0;
  std::optional<int64_t> log_every;  // default: every step (synthetic), every 100 steps (text)
  // Translation on parallel text.
  std::string src, tgt, tsv, valid_src, valid_tgt, too_long = "drop", time_budget;
  int spm_vocab = 8000, valid_beam = 1;
  int64_t spm_sample = 0, max_tokens = 4096, max_epochs = 0, valid_every = 1000, valid_bleu_sentences = 200,
          patience = 0, keep_checkpoints = 0;
  // Language models and encoders.
  std::string arch = models::kEncoderDecoder, text, valid_text;
  int64_t block_size = 128;
  std::string objective, labelled, valid_labelled, init;
  // Data parallelism (`mpirun -np N qkv train ...`): every rank calls run_training with the same
  // request and its communicator (TrainerOptions::comm); nullptr: one process. Rank 0 alone
  // prepares OUT, builds the vocabulary, validates and writes checkpoints and metrics.jsonl.
  dist::Communicator* comm = nullptr;
  int64_t bucket_bytes = 25 << 20;  // gradient all-reduce buckets
  bool overlap = true;              // start buckets during backward
  bool nccl = false;                // sum on the GPUs through NCCL (TrainerOptions::nccl)
  // Where the model trains (`--device cuda:N`): its weights, gradients and optimizer state live
  // there; batches are made on the host and moved; checkpoints are the same files either way.
  Device device = Device::cpu();
};

// Trains as `request` says; `stop` (optional) is polled between steps: set it to stop, save and
// return with interrupted = true. Errors (bad flags, files, a diverged step) are qkv::Error. With
// more than one rank, a failure before training (a rank that cannot read its data) is a
// dist::CollectiveError on every rank, naming the rank; one during training is a dist::RankFailure
// on the failing rank, after which the caller must abort the job (the others wait for it).
TrainResult run_training(const TrainRequest& request, const TrainerEvents& events = {},
                         const std::atomic<bool>* stop = nullptr);

// Where the run keeps its last checkpoint: OUT/last for text runs, the --output-dir checkpoint itself for
// synthetic ones ("" when a synthetic run saves nothing).
std::string last_checkpoint_dir(const TrainRequest& request);

}  // namespace qkv::train
