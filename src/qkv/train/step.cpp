#include "qkv/train/step.h"

#include <algorithm>
#include <limits>

namespace qkv::train {

namespace {
int64_t count_labels(const Tensor& labels, int32_t pad) {
  int64_t n = 0;
  const int32_t* l = labels.i32();
  for (int64_t i = 0; i < labels.numel(); ++i) n += l[i] != pad;
  return n;
}

// Forward and backward of one chunk; the loss gradient is d(batch loss)/d(chunk loss) = weight.
float chunk_forward_backward(const models::Transformer& model, const Tensor& src, const Tensor& tgt,
                             float label_smoothing, float weight) {
  const data::TeacherForcing tf = data::shift_target(tgt);
  const int64_t V = model.config().tgt_vocab_size;
  Graph graph;  // this chunk's forward and backward, nothing else
  const GraphScope scope(graph);
  Var loss;
  {
    const Var logits = model.forward(src, tf.input);  // (B, T-1, V)
    loss = fn::cross_entropy(fn::reshape(logits, Dims{-1, V}), tf.labels, model.config().pad_id, label_smoothing);
  }  // the logits Var is dropped here so only the loss node holds them
  const float value = loss.value().item();
  graph.backward(loss, Tensor::full(loss.shape(), weight));
  return value;
}
}  // namespace

StepResult forward_backward(const models::Transformer& model, const Tensor& src, const Tensor& tgt,
                            float label_smoothing, int64_t micro_batch_rows) {
  const int32_t pad = model.config().pad_id;
  StepResult r;
  r.target_tokens = count_labels(data::shift_target(tgt).labels, pad);
  const int64_t B = src.size(0);
  if (micro_batch_rows <= 0 || micro_batch_rows >= B) {
    r.loss = chunk_forward_backward(model, src, tgt, label_smoothing, 1.f);
    return r;
  }
  double loss = 0;
  for (int64_t begin = 0; begin < B; begin += micro_batch_rows) {
    const int64_t end = std::min(B, begin + micro_batch_rows);
    const Tensor s = src.slice0(begin, end).contiguous(), t = tgt.slice0(begin, end).contiguous();
    const int64_t n = count_labels(data::shift_target(t).labels, pad);
    if (n == 0) continue;  // an all-padding chunk contributes nothing
    const float share = static_cast<float>(n) / static_cast<float>(r.target_tokens);
    loss += static_cast<double>(chunk_forward_backward(model, s, t, label_smoothing, share)) * share;
  }
  r.loss = r.target_tokens ? static_cast<float>(loss) : std::numeric_limits<float>::quiet_NaN();
  return r;
}

StepResult train_step(const models::Transformer& model, Adam& optimizer, const Tensor& src, const Tensor& tgt,
                      float label_smoothing, int64_t micro_batch_rows) {
  optimizer.zero_grad();
  StepResult r = forward_backward(model, src, tgt, label_smoothing, micro_batch_rows);
  optimizer.step();
  return r;
}

ScoreResult score(const models::Transformer& model, const std::vector<data::IdLine>& src,
                  const std::vector<data::IdLine>& tgt, int64_t batch_size) {
  QKV_CHECK(src.size() == tgt.size(), "score: " << src.size() << " source lines but " << tgt.size() << " target lines");
  QKV_CHECK(batch_size > 0, "score: batch size must be positive");
  NoGradGuard no_grad;
  const int32_t pad = model.config().pad_id;
  ScoreResult result;
  result.line_log_prob.assign(src.size(), 0.0);
  for (size_t begin = 0; begin < src.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(src.size(), begin + static_cast<size_t>(batch_size));
    const std::vector<data::IdLine> s(src.begin() + begin, src.begin() + end), t(tgt.begin() + begin, tgt.begin() + end);
    const data::TeacherForcing tf = data::shift_target(data::pad_batch(t, pad));
    const Var logits = model.forward(data::pad_batch(s, pad), tf.input);  // (b, T-1, V)
    Tensor row_loss;
    fn::cross_entropy(fn::reshape(logits, Dims{-1, model.config().tgt_vocab_size}), tf.labels, pad, 0.f, &row_loss);
    const int64_t width = tf.input.size(1);
    for (size_t i = 0; i < end - begin; ++i)
      for (int64_t j = 0; j < width; ++j) {
        if (tf.labels.i32()[i * width + j] == pad) continue;
        const double nll = row_loss.f32()[i * width + j];
        result.line_log_prob[begin + i] -= nll;
        result.total_nll += nll;
        result.tokens += 1;
      }
  }
  return result;
}

}  // namespace qkv::train
