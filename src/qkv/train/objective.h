// What a training batch means: the loss the one training step (train/step.h) computes for it.
//   teacher forcing  (translation, language models): logits of tgt[:, :-1], labels tgt[:, 1:], pad
//                    ignored; an encoder-decoder model also reads src.
//   masked LM        (encoder-only pretraining): tgt holds the corrupted ids, labels (B, T) the
//                    original ids of the chosen positions (-1 elsewhere); only those rows of the
//                    hidden states go through the masked-LM head.
//   classification   (encoder-only fine-tuning): tgt holds [CLS] ... [SEP] rows padded with pad_id,
//                    labels (B) the label index of each row.
// Each loss is the mean over the batch's labels (cross-entropy, optional label smoothing), and
// count_labels says how many there are: gradient accumulation weights a chunk of rows by its share.
#pragma once
#include <cstdint>

#include "qkv/autograd/functions.h"
#include "qkv/data/batcher.h"
#include "qkv/models/model.h"
#include "qkv/train/memory_budget.h"

namespace qkv::train {

class Objective {
 public:
  virtual ~Objective() = default;
  // The labels of `batch` that count in its loss (non-pad next tokens, chosen positions, rows).
  virtual int64_t count_labels(const models::Model& model, const data::Batch& batch) const = 0;
  // The mean loss over those labels, recorded in the current graph. Only the returned Var should
  // keep the logits alive, so that one chunk's activations are freed before the next.
  virtual Var loss(const models::Model& model, const data::Batch& batch, float label_smoothing) const = 0;
  // What the step runs for `batch` (positions, outputs), for its memory estimate (train/memory_budget.h).
  virtual StepShape step_shape(const models::Model& model, const data::Batch& batch) const = 0;
};

const Objective& teacher_forcing();
const Objective& masked_lm();
const Objective& classification();

// Rows [begin, end) of every tensor of `batch` (src, tgt, labels), contiguous.
data::Batch batch_rows(const data::Batch& batch, int64_t begin, int64_t end);

// Masked-LM logits (N, V) of the positions whose label is not -1, in row-major order, and their
// labels (N): the vocabulary projection runs on those N rows only, not on all B * T.
struct MaskedLogits {
  Var logits;
  Tensor labels;
};
MaskedLogits masked_lm_logits(const models::Model& model, const Tensor& ids, const Tensor& labels);
// Classification logits (B, labels) of [CLS] ... [SEP] rows padded with the model's pad_id.
Var classification_logits(const models::Model& model, const Tensor& ids);

}  // namespace qkv::train
