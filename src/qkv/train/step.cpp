#include "qkv/train/step.h"

#include <algorithm>

namespace qkv::train {

StepResult forward_backward(const models::Transformer& model, const Tensor& src, const Tensor& tgt,
                            float label_smoothing) {
  const data::TeacherForcing tf = data::shift_target(tgt);
  const int64_t V = model.config().tgt_vocab_size;
  Var loss;
  {
    const Var logits = model.forward(src, tf.input);  // (B, T-1, V)
    loss = fn::cross_entropy(fn::reshape(logits, Dims{-1, V}), tf.labels, model.config().pad_id, label_smoothing);
  }  // the logits Var is dropped here so only the loss node holds them
  StepResult r;
  r.loss = loss.value().item();
  const int32_t* labels = tf.labels.i32();
  for (int64_t i = 0; i < tf.labels.numel(); ++i) r.target_tokens += labels[i] != model.config().pad_id;
  backward(loss);
  return r;
}

StepResult train_step(const models::Transformer& model, Adam& optimizer, const Tensor& src, const Tensor& tgt,
                      float label_smoothing) {
  optimizer.zero_grad();
  StepResult r = forward_backward(model, src, tgt, label_smoothing);
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
