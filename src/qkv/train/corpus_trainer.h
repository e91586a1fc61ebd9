// Training a translation model on line-aligned parallel text:
//   SentencePiece vocabulary (trained on the training text, joint for source and target),
//   token-count batches with length bucketing, label smoothing, learning-rate schedule,
//   gradient-norm clipping, periodic validation (loss and BLEU on a dev set), `best` and `last`
//   checkpoints, early stopping, a wall-clock budget, a stop request saving `last`, and exact
//   resume (weights, optimizer, step, data position, dropout RNG). The loop is train::Trainer;
//   this file prepares its data, vocabulary, model and validator.
//
// Layout of the output directory:
//   OUT/spm.model                         the SentencePiece model
//   OUT/last/, OUT/best/                  checkpoints (config.json, model.safetensors,
//                                         source.spm.model, target.spm.model; last/ also
//                                         optimizer.safetensors and train_state.json)
#pragma once
#include <cstdint>
#include <string>

#include "qkv/data/batcher.h"
#include "qkv/models/config.h"
#include "qkv/train/run_options.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// inverse_sqrt with peak 5e-4 after 4000 warm-up steps, clipping at 1.0, label smoothing 0.1.
Hyper default_hyper();

struct CorpusTrainOptions : RunOptions {
  CorpusTrainOptions() { hyper = default_hyper(); }
  // Data: two files, or one TSV with source<TAB>target.
  std::string src, tgt, tsv;
  std::string valid_src, valid_tgt;
  // Model: vocabulary sizes come from SentencePiece.
  models::TransformerConfig model;
  int64_t max_tokens = 4096;
  // How pairs are sorted into batches (data/batcher.h); a resumed run keeps the order it was saved in.
  data::LengthOrder length_order = data::LengthOrder::LongerSide;
  std::string too_long = "drop";       // drop | truncate (training pairs over max_seq_length)
  int64_t valid_bleu_sentences = 200;  // dev sentences translated for BLEU (0: all)
  int valid_beam = 1;
};

// Trains until a limit, early stopping or a stop request (*stop set, e.g. by the caller's SIGINT
// handler); OUT/last is saved in every case. Progress goes to `events`.
TrainResult train_on_corpus(const CorpusTrainOptions& options, const TrainerEvents& events = {},
                            const std::atomic<bool>* stop = nullptr);

}  // namespace qkv::train
