// One training step and batched scoring of any model family, as seed 000's loop:
//   optimizer.zero_grad(); logits = model(src, tgt[:, :-1]);
//   loss = CrossEntropyLoss(ignore_index=pad)(logits.view(-1, V), tgt[:, 1:].view(-1));
//   loss.backward(); optimizer.step()
// A decoder-only model has no source: src is an undefined Tensor and tgt holds token blocks, so the
// loss is that of predicting token i+1 from tokens 0..i. Other objectives (masked LM,
// classification: train/objective.h) go through the same step with their batches' labels.
#pragma once
#include <functional>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/autograd/functions.h"
#include "qkv/models/model.h"
#include "qkv/train/adam.h"
#include "qkv/train/objective.h"

namespace qkv::train {

struct StepResult {
  float loss = 0;
  int64_t target_tokens = 0;  // labels in the loss (non-pad next tokens, chosen positions, rows)
};

class GradientReducer;

// How forward_backward runs a batch.
struct StepOptions {
  float label_smoothing = 0.f;
  int64_t micro_batch_rows = 0;  // > 0: chunks of this many rows (gradient accumulation)
  // Data parallelism: this rank runs rows [row_begin, row_end) of the batch (-1: to the end), in
  // chunks of micro_batch_rows, each weighted by its share of the whole batch's labels; `reducer`
  // accumulates the chunks and sums the gradients over the ranks, so that every rank ends with the
  // whole batch's gradient and the returned loss is the whole batch's.
  int64_t row_begin = 0, row_end = -1;
  GradientReducer* reducer = nullptr;
};

// Forward + backward (no optimizer step): gradients are accumulated into the parameters.
// micro_batch_rows > 0 runs the batch in chunks of that many rows (gradient accumulation): each
// chunk's loss gradient is weighted by its share of the batch's non-pad labels, so the gradient is
// that of the whole batch's mean loss (up to float summation order) while only one chunk's
// activations are alive at a time. Each chunk's backward goes into fresh gradients that are then
// added to the earlier chunks' (train/grad_sync.h), and each row gets the dropout mask it gets in
// the whole batch (Generator::set_rows), so a chunked step equals a data-parallel one exactly.
StepResult forward_backward(const models::Model& model, const Objective& objective, const data::Batch& batch,
                            const StepOptions& options);
StepResult forward_backward(const models::Model& model, const Objective& objective, const data::Batch& batch,
                            float label_smoothing = 0.f, int64_t micro_batch_rows = 0);
// Teacher forcing of (src, tgt).
StepResult forward_backward(const models::Model& model, const Tensor& src, const Tensor& tgt,
                            float label_smoothing = 0.f, int64_t micro_batch_rows = 0);
// zero_grad, forward_backward, optimizer step.
StepResult train_step(const models::Model& model, Adam& optimizer, const Tensor& src, const Tensor& tgt,
                      float label_smoothing = 0.f, int64_t micro_batch_rows = 0);

struct ScoreResult {
  std::vector<double> line_log_prob;  // per pair: sum of log p(label) over its non-pad labels
  double total_nll = 0;               // summed over all non-pad labels
  int64_t tokens = 0;
  double mean_loss() const { return tokens ? total_nll / tokens : 0.0; }
};
// Teacher-forced log-probabilities in eval mode without recording (pairs batched with padding).
// An encoder-decoder model scores (src, tgt) pairs, tgt with BOS and EOS; a decoder-only model
// takes an empty `src` and scores each tgt line's tokens 1.. given the ones before them.
// after_batch, when set, is called after each batch (validation's sign of life). The products run
// in the model's compute type (Model::set_compute_type), the float32 weights through BLAS without.
ScoreResult score(const models::Model& model, const std::vector<data::IdLine>& src,
                  const std::vector<data::IdLine>& tgt, int64_t batch_size,
                  const std::function<void()>& after_batch = {});

}  // namespace qkv::train
