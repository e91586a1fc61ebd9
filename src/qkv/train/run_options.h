// What every training run on text shares, whatever the model family: the run directory
// (OUT/last, OUT/best, OUT/step-NNNNNNN), the SentencePiece vocabulary trained into OUT/spm.model,
// the optimisation settings, the limits and the validation cadence.
#pragma once
#include <atomic>
#include <functional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/train/trainer.h"

namespace qkv::train {

struct RunOptions {
  std::string out;
  bool resume = false;  // continue from OUT/last
  // Vocabulary.
  int spm_vocab = 8000;
  std::string spm_type = "unigram";
  int64_t spm_sample = 0;  // lines sampled to train SentencePiece (0 = all)
  bool recompute_ffn = false;
  // Optimisation (a resumed run passes the saved values unless the user overrides them).
  Hyper hyper;
  int64_t max_steps = 0;   // 0: no limit
  int64_t max_epochs = 0;  // 0: no limit
  double time_budget = 0;  // seconds of training (0: no limit)
  int64_t valid_every = 1000;  // steps
  int64_t save_every = 0;      // also save OUT/last every N steps (0: at validations and the end only)
  int64_t patience = 0;        // stop after this many validations without a better dev score (0: never)
  // Also keep the weights of the last N validations as OUT/step-NNNNNNN (for `qkv average`);
  // older ones are deleted. 0: keep none.
  int64_t keep_checkpoints = 0;
  uint64_t seed = 0;
  int64_t log_every = 100;
  // Data parallelism (TrainerOptions::comm): rank 0 alone prepares OUT, builds the vocabulary and
  // writes; the other ranks read what it wrote.
  dist::Communicator* comm = nullptr;
  int64_t bucket_bytes = 25 << 20;
  bool overlap = true;
  bool nccl = false;
  Device device = Device::cpu();  // TrainerOptions::device
};

// Runs `f` (building a vocabulary, preparing OUT) on rank 0 only; the other ranks wait for it.
// Throws dist::CollectiveError on every rank when it failed there (or Error in one process).
void on_rank0(dist::Communicator* comm, const std::function<void()>& f);

// Creates o.out, removes vocabulary files of killed runs, and when resuming checks that OUT/last
// and OUT/<tokenizer_file> exist. Returns the path of OUT/<tokenizer_file>.
std::string prepare_run_directory(const RunOptions& o, const std::string& tokenizer_file = "spm.model");

// The Trainer's options for a run in o.out: checkpoints OUT/last and OUT/best, each also holding
// `extra_files` (name in the checkpoint, source path), e.g. the tokenizer.
TrainerOptions run_trainer_options(const RunOptions& o, int64_t d_model,
                                   std::vector<std::pair<std::string, std::string>> extra_files,
                                   const std::atomic<bool>* stop);

}  // namespace qkv::train
