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
#include <functional>
#include <string>

#include "qkv/models/config.h"
#include "qkv/train/run_options.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// AdamW (betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on matrices: nanoGPT's), inverse_sqrt with
// peak 1e-3 after 1000 warm-up steps, clipping at 1.0, no label smoothing.
Hyper default_lm_hyper();

struct LmTrainOptions : RunOptions {
  LmTrainOptions() { hyper = default_lm_hyper(); }
  std::string text, valid_text;
  // Model: the vocabulary size and ids come from SentencePiece; max_seq_length is raised to the
  // block size when smaller.
  models::TransformerConfig model = models::decoder_only_defaults();
  int64_t block_size = 128;  // tokens per training sequence
  int64_t batch_size = 16;   // sequences per batch
};

TrainResult train_language_model(const LmTrainOptions& options, const TrainerEvents& events = {},
                                 const std::atomic<bool>* stop = nullptr);

// The held-out loss per token of a language model on `text` (lines packed and cut into blocks of
// block_size as in training, every token scored): for validation and `qkv score`-style reports.
double language_model_loss(const models::Model& model, const std::vector<data::IdLine>& blocks, int64_t batch_size,
                           const std::function<void()>& after_batch = {});

}  // namespace qkv::train
