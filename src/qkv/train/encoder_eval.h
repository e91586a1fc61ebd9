// Held-out scores of encoder-only models, in eval mode without recording: the masked-LM loss and
// accuracy of fixed corrupted sequences (validation of pretraining), and class probabilities with
// accuracy and macro-F1 (validation of fine-tuning, `qkv classify`).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/models/model.h"
#include "qkv/train/masking.h"

namespace qkv::train {

struct MaskedLmScore {
  double loss = 0;      // mean cross-entropy over the chosen positions
  double accuracy = 0;  // share of chosen positions whose most probable id is the original
  int64_t positions = 0;
};
// after_batch, when set, is called after each batch (validation's sign of life), here and below.
MaskedLmScore masked_lm_score(const models::Model& model, const std::vector<MaskedSequence>& sequences,
                              int64_t batch_size, const std::function<void()>& after_batch = {});

// Softmax probabilities (rows, labels) of [CLS] ... [SEP] rows, batched (longest first, padded
// with the model's pad_id, which must be an id), in the order of `rows`.
Tensor class_probabilities(const models::Model& model, const std::vector<data::IdLine>& rows, int64_t batch_size,
                           const std::function<void()>& after_batch = {});

struct ClassificationScore {
  double loss = 0;  // mean cross-entropy of the gold labels
  double accuracy = 0;
  double macro_f1 = 0;  // mean over the labels that occur in gold or predictions of F1 = 2PR / (P + R)
  // confusion[g][p]: rows whose gold label is g and predicted label p (labels x labels), from which
  // every per-label precision, recall and F1 follows (`qkv plot` draws them).
  std::vector<std::vector<int64_t>> confusion;
};
// Predictions are the most probable label (the lowest index among ties).
ClassificationScore classification_score(const Tensor& probabilities, const std::vector<int32_t>& gold);

}  // namespace qkv::train
