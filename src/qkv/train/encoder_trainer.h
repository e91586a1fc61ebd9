// Training encoder-only models (BERT) through the one train::Trainer, with exact resume:
//
//   masked-LM pretraining on raw text (train_masked_lm): a SentencePiece vocabulary trained on the
//   text with [CLS] [SEP] [MASK] as user-defined symbols (ids 4, 5, 6; pad 0), lines packed into
//   [CLS] ... [SEP] blocks (train/encoder_data.h), BERT's 15% / 80-10-10 masking (train/masking.h),
//   the loss over the chosen positions only; validation: masked-LM loss and accuracy of held-out
//   text masked the same way at every validation; best = lowest loss.
//
//   classification fine-tuning on "label<TAB>text" lines (train_classifier): labels collected
//   from the training file (sorted, config.json "labels"), the model either from --init (an
//   encoder-only checkpoint: its embeddings, blocks and pooler; its masked-LM head dropped, a new
//   classifier) with that checkpoint's tokenizer, or from scratch with a SentencePiece vocabulary
//   of the text; validation: loss, accuracy and macro-F1; best = highest macro-F1.
//
// Layout of the output directory as language-model training (train/lm_trainer.h): OUT/spm.model
// (or the --init checkpoint's tokenizer file), OUT/last, OUT/best.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "qkv/models/config.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/run_options.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// BERT's optimiser: AdamW (betas 0.9 / 0.999, eps 1e-6, weight decay 0.01 on matrices), clipping
// at 1.0. Pretraining: peak lr 1e-4 after 1000 warm-up steps (BERT's peak; its 10,000 warm-up
// steps were 1% of a 1M-step run), then inverse_sqrt decay. Fine-tuning: peak 5e-5 (the middle of
// BERT's 2e-5 .. 5e-5 range) after 100 steps. Small models trained from scratch want more (1e-3).
Hyper default_mlm_hyper();
Hyper default_classify_hyper();

struct MlmTrainOptions : RunOptions {
  MlmTrainOptions() { hyper = default_mlm_hyper(); }
  std::string text, valid_text;
  // The vocabulary size and special ids come from SentencePiece; max_seq_length is raised to the
  // block size when smaller.
  models::TransformerConfig model = models::encoder_only_defaults();
  int64_t block_size = 128;  // tokens per sequence, [CLS] and [SEP] included
  int64_t batch_size = 32;   // sequences per batch
  double mask_probability = 0.15;
};
TrainResult train_masked_lm(const MlmTrainOptions& options, const TrainerEvents& events = {},
                            const std::atomic<bool>* stop = nullptr);

struct ClassifyTrainOptions : RunOptions {
  ClassifyTrainOptions() { hyper = default_classify_hyper(); }
  std::string labelled, valid_labelled;
  std::string init;  // an encoder-only checkpoint to start from ("": from scratch)
  models::TransformerConfig model = models::encoder_only_defaults();  // from scratch only
  int64_t max_tokens = 128;  // per sentence, [CLS] and [SEP] included; longer ones are truncated
  int64_t batch_size = 32;   // sentences per batch
};
TrainResult train_classifier(const ClassifyTrainOptions& options, const TrainerEvents& events = {},
                             const std::atomic<bool>* stop = nullptr);

// What both runs share when they train their own vocabulary: OUT/spm.model trained on `lines` with
// [CLS] [SEP] [MASK] as user-defined symbols (unless an earlier run of OUT left it), and a config on
// that vocabulary (sizes, pad_id, cls_id, sep_id, mask_id).
void ensure_bert_vocabulary(const RunOptions& o, const std::vector<std::string>& lines, const std::string& spm_path);
models::TransformerConfig with_bert_vocabulary(models::TransformerConfig c, const text::SentencePiece& spm);

}  // namespace qkv::train
