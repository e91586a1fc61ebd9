#include "qkv/train/step.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "qkv/dist/communicator.h"
#include "qkv/train/grad_sync.h"

namespace qkv::train {

namespace {
// Forward and backward of one chunk; the loss gradient is d(batch loss)/d(chunk loss) = weight.
float chunk_forward_backward(const models::Model& model, const Objective& objective, const data::Batch& batch,
                             float label_smoothing, float weight) {
  Graph graph;  // this chunk's forward and backward, nothing else
  const GraphScope scope(graph);
  const Var loss = objective.loss(model, batch, label_smoothing);  // its logits live only in the graph
  const float value = loss.value().item();
  graph.backward(loss, Tensor::full(loss.shape(), weight).to(loss.value().device()));
  return value;
}
}  // namespace

StepResult forward_backward(const models::Model& model, const Objective& objective, const data::Batch& batch,
                            const StepOptions& o) {
  StepResult r;
  r.target_tokens = objective.count_labels(model, batch);
  const int64_t B = batch.tgt.size(0);
  const int64_t begin = std::clamp<int64_t>(o.row_begin, 0, B);
  const int64_t end = o.row_end < 0 ? B : std::clamp<int64_t>(o.row_end, begin, B);
  const int64_t step_rows = o.micro_batch_rows > 0 ? o.micro_batch_rows : B;
  if (!o.reducer && begin == 0 && end == B && step_rows >= B) {  // the whole batch at once
    r.loss = chunk_forward_backward(model, objective, batch, o.label_smoothing, 1.f);
    return r;
  }
  // The chunks with labels (a chunk of padding only, or with nothing masked, contributes nothing).
  struct Chunk {
    int64_t begin, end, labels;
  };
  std::vector<Chunk> chunks;
  for (int64_t b = begin; b < end; b += step_rows) {
    const int64_t e = std::min(end, b + step_rows);
    const int64_t n = objective.count_labels(model, batch_rows(batch, b, e));
    if (n > 0) chunks.push_back({b, e, n});
  }
  std::unique_ptr<GradientReducer> local;
  GradientReducer* reducer = o.reducer;
  if (!reducer) {
    local = std::make_unique<GradientReducer>(model.parameters(), dist::single_process());
    reducer = local.get();
  }
  Generator& gen = model.generator();
  const uint64_t seed = gen.seed(), start = gen.offset();
  uint64_t after = start;
  double loss = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& k = chunks[c];
    const bool last = c + 1 == chunks.size();
    const data::Batch rows = batch_rows(batch, k.begin, k.end);
    const float share = static_cast<float>(k.labels) / static_cast<float>(r.target_tokens);
    gen.set_state(seed, start);
    gen.set_rows(k.begin, k.end - k.begin, B);
    if (last) reducer->arm();
    {
      const BackwardHookScope hook(last ? reducer->backward_hook() : nullptr);
      loss += static_cast<double>(chunk_forward_backward(model, objective, rows, o.label_smoothing, share)) * share;
    }
    if (!last) reducer->stash();
    after = gen.offset();
  }
  gen.clear_rows();
  // Every chunk ends at the offset the whole batch ends at; a rank that ran none learns it here.
  after = static_cast<uint64_t>(reducer->finish(chunks.empty() ? static_cast<int64_t>(start) : static_cast<int64_t>(after)));
  gen.set_state(seed, after);
  if (reducer->comm().size() > 1) reducer->comm().allreduce_sum(&loss, 1);
  r.loss = r.target_tokens ? static_cast<float>(loss) : std::numeric_limits<float>::quiet_NaN();
  return r;
}

StepResult forward_backward(const models::Model& model, const Objective& objective, const data::Batch& batch,
                            float label_smoothing, int64_t micro_batch_rows) {
  StepOptions o;
  o.label_smoothing = label_smoothing;
  o.micro_batch_rows = micro_batch_rows;
  return forward_backward(model, objective, batch, o);
}

StepResult forward_backward(const models::Model& model, const Tensor& src, const Tensor& tgt, float label_smoothing,
                            int64_t micro_batch_rows) {
  data::Batch batch;
  batch.src = src;
  batch.tgt = tgt;
  return forward_backward(model, teacher_forcing(), batch, label_smoothing, micro_batch_rows);
}

StepResult train_step(const models::Model& model, Adam& optimizer, const Tensor& src, const Tensor& tgt,
                      float label_smoothing, int64_t micro_batch_rows) {
  optimizer.zero_grad();
  StepResult r = forward_backward(model, src, tgt, label_smoothing, micro_batch_rows);
  optimizer.step();
  return r;
}

namespace {
// Rows of ids right-padded with `filler` (a valid id: decoder-only models may have no padding id).
// Labels (B * width, as shift_target's) of the padding are -1, which the loss ignores.
data::TeacherForcing lm_teacher_forcing(const std::vector<data::IdLine>& lines, int32_t filler) {
  int64_t width = 1;
  for (const data::IdLine& l : lines) width = std::max<int64_t>(width, static_cast<int64_t>(l.size()) - 1);
  const int64_t B = static_cast<int64_t>(lines.size());
  data::TeacherForcing tf{Tensor::empty(Dims{B, width}, DType::I32), Tensor::empty(Dims{B * width}, DType::I32)};
  for (int64_t b = 0; b < B; ++b) {
    const data::IdLine& l = lines[static_cast<size_t>(b)];
    for (int64_t j = 0; j < width; ++j) {
      const bool real = j + 1 < static_cast<int64_t>(l.size());
      tf.input.i32()[b * width + j] = real ? l[static_cast<size_t>(j)] : filler;
      tf.labels.i32()[b * width + j] = real ? l[static_cast<size_t>(j + 1)] : -1;
    }
  }
  return tf;
}
}  // namespace

ScoreResult score(const models::Model& model, const std::vector<data::IdLine>& src,
                  const std::vector<data::IdLine>& tgt, int64_t batch_size, const std::function<void()>& after_batch) {
  const bool lm = model.config().decoder_only();
  QKV_CHECK(lm ? src.empty() : src.size() == tgt.size(),
            "score: " << src.size() << " source lines but " << tgt.size() << " target lines"
                      << (lm ? " (a decoder-only model scores target lines alone)" : ""));
  QKV_CHECK(batch_size > 0, "score: batch size must be positive");
  NoGradGuard no_grad;
  const int32_t pad = model.config().pad_id, ignored = lm ? -1 : pad;
  ScoreResult result;
  result.line_log_prob.assign(tgt.size(), 0.0);
  for (size_t begin = 0; begin < tgt.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(tgt.size(), begin + static_cast<size_t>(batch_size));
    const std::vector<data::IdLine> t(tgt.begin() + begin, tgt.begin() + end);
    data::TeacherForcing tf;
    Tensor src_batch;
    if (lm) {
      tf = lm_teacher_forcing(t, model.config().eos_id);
    } else {
      tf = data::shift_target(data::pad_batch(t, pad));
      src_batch = data::pad_batch(std::vector<data::IdLine>(src.begin() + begin, src.begin() + end), pad);
    }
    const Device on = model.device();  // the batch goes where the weights are; the losses come back
    const Var logits = model.teacher_forced_logits(src_batch.defined() ? src_batch.to(on) : src_batch,
                                                   tf.input.to(on));  // (b, T-1, V)
    Tensor row_loss;
    fn::cross_entropy(fn::reshape(logits, Dims{-1, model.output_vocab_size()}), tf.labels.to(on), ignored, 0.f,
                      &row_loss);
    row_loss = row_loss.to(Device::cpu());
    const int64_t width = tf.input.size(1);
    for (size_t i = 0; i < end - begin; ++i)
      for (int64_t j = 0; j < width; ++j) {
        if (tf.labels.i32()[i * width + j] == ignored) continue;
        const double nll = row_loss.f32()[i * width + j];
        result.line_log_prob[begin + i] -= nll;
        result.total_nll += nll;
        result.tokens += 1;
      }
    if (after_batch) after_batch();
  }
  return result;
}

}  // namespace qkv::train
