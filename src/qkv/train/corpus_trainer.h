// Training a translation model on line-aligned parallel text:
//   SentencePiece vocabulary (trained on the training text, joint for source and target),
//   token-count batches with length bucketing, label smoothing, learning-rate schedule,
//   gradient-norm clipping, periodic validation (loss and BLEU on a dev set), `best` and `last`
//   checkpoints, early stopping, a wall-clock budget, Ctrl-C (SIGINT/SIGTERM) saving `last`
//   before exiting, and exact resume (weights, optimizer, step, data position, dropout RNG).
//
// Layout of the output directory:
//   OUT/spm.model                         the SentencePiece model
//   OUT/last/, OUT/best/                  checkpoints (config.json, model.safetensors,
//                                         source.spm.model, target.spm.model; last/ also
//                                         optimizer.safetensors and train_state.json)
#pragma once
#include <cstdint>
#include <string>

#include "qkv/models/config.h"
#include "qkv/train/schedule.h"

namespace qkv::train {

struct CorpusTrainOptions {
  // Data: two files, or one TSV with source<TAB>target.
  std::string src, tgt, tsv;
  std::string valid_src, valid_tgt;
  std::string out;
  bool resume = false;  // continue from OUT/last
  // Vocabulary.
  int spm_vocab = 8000;
  std::string spm_type = "unigram";
  int64_t spm_sample = 0;  // lines sampled to train SentencePiece (0 = all)
  // Model: vocabulary sizes come from SentencePiece.
  models::TransformerConfig model;
  bool recompute_ffn = false;
  int64_t micro_batch = 0;  // rows per forward/backward chunk (0: whole batch)
  // Optimisation.
  Schedule schedule{"inverse_sqrt", 5e-4, 4000, 512};
  double clip_norm = 1.0;
  float label_smoothing = 0.1f;
  int64_t max_tokens = 4096;
  std::string too_long = "drop";  // drop | truncate (training pairs over max_seq_length)
  int64_t max_steps = 0;          // 0: no limit
  int64_t max_epochs = 0;         // 0: no limit
  double time_budget = 0;         // seconds of training (0: no limit)
  // Validation.
  int64_t valid_every = 1000;          // steps
  int64_t valid_bleu_sentences = 200;  // dev sentences translated for BLEU (0: all)
  int valid_beam = 1;
  int64_t patience = 0;  // stop after this many validations without a better dev score (0: never)
  // Also keep the weights of the last N validations as OUT/step-NNNNNNN (for `qkv average`);
  // older ones are deleted. 0: keep none.
  int64_t keep_checkpoints = 0;
  uint64_t seed = 0;
  int64_t log_every = 100;
};

// Returns the process exit code (0 done, 130 interrupted after saving).
int train_on_corpus(const CorpusTrainOptions& options);

}  // namespace qkv::train
