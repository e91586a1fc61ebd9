#include "qkv/nn/layers.h"

#include <cmath>
#include <random>

namespace qkv::nn {

namespace {
thread_local bool skip_random_init = false;
}  // namespace

SkipRandomInitGuard::SkipRandomInitGuard() : previous_(skip_random_init) { skip_random_init = true; }
SkipRandomInitGuard::~SkipRandomInitGuard() { skip_random_init = previous_; }
bool random_init_skipped() { return skip_random_init; }

namespace {
Tensor uniform(const Dims& shape, float bound, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  std::mt19937_64 eng = gen.engine();
  if (skip_random_init) return t;
  std::uniform_real_distribution<float> dist(-bound, bound);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(eng);
  return t;
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool has_bias) {
  const float bound = 1.f / std::sqrt(static_cast<float>(in_features));
  weight = register_parameter("weight", uniform(Dims{out_features, in_features}, bound, gen));
  if (has_bias) bias = register_parameter("bias", uniform(Dims{out_features}, bound, gen));
}

void Linear::tie_weight(const Var& w) {
  QKV_CHECK(w.shape() == weight.shape(), "Linear::tie_weight: " << w.shape() << " vs weight " << weight.shape());
  weight = w;
  replace_parameter("weight", w);
  inference_ = {};
}

bool Linear::uses_inference_weight(const Var& x) const {
  const bool records = grad_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                          (bias.defined() && bias.requires_grad()));
  return inference_.defined() && !records;
}

Var Linear::forward(const Var& x, fn::InputUse use) const {
  if (!uses_inference_weight(x)) return fn::linear(x, weight, bias, use);
  return Var(ops::linear_forward(x.value(), inference_, bias.defined() ? bias.value() : Tensor()));
}

void Linear::set_compute_type(ComputeType type) {
  inference_ = ops::prepare_linear_weight(weight.value(), linear_dtype(type));
}

void Embedding::tie_weight(const Var& w) {
  QKV_CHECK(w.shape() == weight.shape(), "Embedding::tie_weight: " << w.shape() << " vs weight " << weight.shape());
  weight = w;
  replace_parameter("weight", w);
  inference_table_ = Tensor();
}

Var Embedding::forward(const Tensor& ids) const {
  if (!inference_table_.defined() || (grad_enabled() && weight.requires_grad()))
    return fn::embedding(weight, ids, padding_idx);
  return Var(ops::embedding_forward(inference_table_, ids));
}

void Embedding::set_compute_type(ComputeType type) {
  const DType dtype = table_dtype(type);
  inference_table_ = dtype == DType::F32 ? Tensor() : weight.value().to(dtype);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen) {
  Tensor t = Tensor::empty(Dims{num_embeddings, dim});
  std::mt19937_64 eng = gen.engine();
  std::normal_distribution<float> dist(0.f, 1.f);
  if (!skip_random_init)
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(eng);
  weight = register_parameter("weight", std::move(t));
}

LayerNorm::LayerNorm(int64_t dim, float eps, ops::LayerNormVariant variant) : eps_(eps), variant_(variant) {
  weight = register_parameter("weight", Tensor::full(Dims{dim}, 1.f));
  if (variant != ops::LayerNormVariant::RMS) bias = register_parameter("bias", Tensor::zeros(Dims{dim}));
}

Dropout::Mask Dropout::draw(int64_t numel, int64_t rows) const {
  if (!training() || p_ == 0.f) return {};
  const uint64_t offset = gen_->reserve_rows(static_cast<uint64_t>(numel), rows);
  return {true, gen_->seed(), offset};
}

Var Dropout::apply(const Var& x, const Mask& mask) const {
  return mask.active ? fn::dropout(x, p_, mask.seed, mask.offset) : x;
}

PositionalEncoding::PositionalEncoding(int64_t d_model, int64_t max_seq_length, bool halves)
    : pe(halves ? ops::sinusoidal_table_halves(max_seq_length, d_model) : ops::sinusoidal_table(max_seq_length, d_model)) {}

}  // namespace qkv::nn
