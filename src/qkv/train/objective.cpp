#include "qkv/train/objective.h"

#include <algorithm>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/models/encoder_model.h"

namespace qkv::train {

namespace {
int64_t count_not(const Tensor& labels, int32_t ignored) {
  int64_t n = 0;
  const int32_t* l = labels.i32();
  for (int64_t i = 0; i < labels.numel(); ++i) n += l[i] != ignored;
  return n;
}

const models::EncoderModel& encoder_of(const models::Model& model, const char* objective) {
  const auto* e = dynamic_cast<const models::EncoderModel*>(&model);
  QKV_CHECK(e, objective << " training needs an encoder-only model, not a" << (model.config().encoder_decoder() ? "n " : " ")
                         << model.config().architecture << " one");
  return *e;
}

// A batch's tensor where the model's parameters are (batches are made on the host).
Tensor on_model(const models::Model& model, const Tensor& t) { return t.defined() ? t.to(model.device()) : t; }

// Padding keys are hidden from attention; a model without a padding id reads every position.
models::EncoderInput encoder_input(const models::Model& model, const Tensor& host_ids) {
  const int32_t pad = model.config().pad_id;
  const Tensor ids = on_model(model, host_ids);
  return {ids, pad >= 0 ? ops::keep_mask(ids, pad) : Tensor(), Tensor()};
}

class TeacherForcing final : public Objective {
 public:
  int64_t count_labels(const models::Model& model, const data::Batch& b) const override {
    return count_not(data::shift_target(b.tgt).labels, model.config().pad_id);
  }
  Var loss(const models::Model& model, const data::Batch& b, float label_smoothing) const override {
    const data::TeacherForcing tf = data::shift_target(b.tgt);
    const Var logits = model.teacher_forced_logits(on_model(model, b.src), on_model(model, tf.input));  // (B, T-1, V)
    return fn::cross_entropy(fn::reshape(logits, Dims{-1, model.output_vocab_size()}), on_model(model, tf.labels),
                             model.config().pad_id, label_smoothing);
  }
  // Logits of every input position (tgt[:, :-1]), padding included; an encoder-decoder model
  // also encodes src.
  StepShape step_shape(const models::Model& model, const data::Batch& b) const override {
    const int64_t B = b.tgt.size(0), T = b.tgt.size(1) - 1;
    const int64_t S = model.config().encoder_decoder() && b.src.defined() ? b.src.size(1) : 0;
    return {B, S, T, B * T, model.output_vocab_size()};
  }
};

class MaskedLm final : public Objective {
 public:
  int64_t count_labels(const models::Model&, const data::Batch& b) const override { return count_not(b.labels, -1); }
  Var loss(const models::Model& model, const data::Batch& b, float label_smoothing) const override {
    const MaskedLogits m = masked_lm_logits(model, b.tgt, b.labels);
    return fn::cross_entropy(m.logits, on_model(model, m.labels), -1, label_smoothing);
  }
  // The head runs on the chosen positions only.
  StepShape step_shape(const models::Model& model, const data::Batch& b) const override {
    return {b.tgt.size(0), 0, b.tgt.size(1), count_not(b.labels, -1), model.output_vocab_size()};
  }
};

class Classification final : public Objective {
 public:
  int64_t count_labels(const models::Model&, const data::Batch& b) const override { return b.labels.numel(); }
  Var loss(const models::Model& model, const data::Batch& b, float label_smoothing) const override {
    return fn::cross_entropy(classification_logits(model, b.tgt), on_model(model, b.labels), -1, label_smoothing);
  }
  StepShape step_shape(const models::Model& model, const data::Batch& b) const override {
    const int64_t labels = std::max<int64_t>(1, static_cast<int64_t>(model.config().labels.size()));
    return {b.tgt.size(0), 0, b.tgt.size(1), b.tgt.size(0), labels};
  }
};
}  // namespace

const Objective& teacher_forcing() {
  static const TeacherForcing o;
  return o;
}
const Objective& masked_lm() {
  static const MaskedLm o;
  return o;
}
const Objective& classification() {
  static const Classification o;
  return o;
}

data::Batch batch_rows(const data::Batch& b, int64_t begin, int64_t end) {
  data::Batch r;
  const auto rows = [&](const Tensor& t) { return t.defined() ? t.slice0(begin, end).contiguous() : Tensor(); };
  r.src = rows(b.src);
  r.tgt = rows(b.tgt);
  r.labels = rows(b.labels);
  r.epoch = b.epoch;
  r.index = b.index;
  return r;
}

MaskedLogits masked_lm_logits(const models::Model& model, const Tensor& ids, const Tensor& labels) {
  const models::EncoderModel& m = encoder_of(model, "masked-LM");
  QKV_CHECK(labels.defined() && labels.shape() == ids.shape(),
            "masked LM: labels " << labels.describe() << " must have the ids' shape " << ids.shape());
  const Var hidden = m.encode(encoder_input(model, ids));  // (B, T, D)
  const int64_t B = ids.size(0), T = ids.size(1), D = model.config().d_model;
  // The chosen positions as rows of the (B*T, D) matrix: an embedding lookup is a differentiable
  // row gather, so the head (dense, GELU, LayerNorm, V-wide projection) runs on ~15% of the rows.
  std::vector<int32_t> rows, targets;
  for (int64_t i = 0; i < B * T; ++i)
    if (labels.i32()[i] != -1) {
      rows.push_back(static_cast<int32_t>(i));
      targets.push_back(labels.i32()[i]);
    }
  const int64_t N = static_cast<int64_t>(rows.size());
  QKV_CHECK(N > 0, "masked LM: a batch with no chosen position");
  const Var chosen = fn::embedding(fn::reshape(hidden, Dims{B * T, D}), on_model(m, Tensor::from_ids(Dims{N}, rows)));
  return {m.mlm_logits(chosen), Tensor::from_ids(Dims{N}, targets)};
}

Var classification_logits(const models::Model& model, const Tensor& ids) {
  const models::EncoderModel& m = encoder_of(model, "classification");
  return m.classify(m.encode(encoder_input(model, ids)));
}

}  // namespace qkv::train
