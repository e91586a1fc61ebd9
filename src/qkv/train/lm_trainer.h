// Training a decoder-only language model on raw text, one document or sentence a line:
//   SentencePiece vocabulary trained on the text, lines packed into blocks (train/lm_data.h),
//   AdamW, the learning-rate schedule, clipping, validation (loss and perplexity on held-out text),
//   `best` and `last`, early stopping, a time budget, a stop request and exact resume: the same
//   train::Trainer as translation, with its data, model and validator prepared here.
//
// Layout of the output directory:
//   OUT/spm.model              the SentencePiece model
//   OUT/last/, OUT/best/       checkpoints (config.json, model.safetensors, spm.model; last/ also
//                              optimizer.safetensors and train_state.json)
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "qkv/models/config.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// AdamW (betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on matrices: nanoGPT's), inverse_sqrt with
// peak 1e-3 after 1000 warm-up steps, clipping at 1.0, no label smoothing.
Hyper default_lm_hyper();

struct LmTrainOptions {
  std::string text, valid_text, out;
  bool resume = false;  // continue from OUT/last
  int spm_vocab = 8000;
  std::string spm_type = "unigram";
  int64_t spm_sample = 0;
  // Model: the vocabulary size and ids come from SentencePiece; max_seq_length is raised to the
  // block size when smaller.
  models::TransformerConfig model = models::decoder_only_defaults();
  bool recompute_ffn = false;
  Hyper hyper = default_lm_hyper();
  int64_t block_size = 128;  // tokens per training sequence
  int64_t batch_size = 16;   // sequences per batch
  int64_t max_steps = 0, max_epochs = 0;
  double time_budget = 0;
  int64_t valid_every = 1000, patience = 0, keep_checkpoints = 0, log_every = 100;
  uint64_t seed = 0;
};

TrainResult train_language_model(const LmTrainOptions& options, const TrainerEvents& events = {},
                                 const std::atomic<bool>* stop = nullptr);

// The held-out loss per token of a language model on `text` (lines packed and cut into blocks of
// block_size as in training, every token scored): for validation and `qkv score`-style reports.
double language_model_loss(const models::Model& model, const std::vector<data::IdLine>& blocks, int64_t batch_size);

}  // namespace qkv::train
