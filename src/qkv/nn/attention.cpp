#include "qkv/nn/attention.h"

namespace qkv::nn {

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen, float attention_dropout)
    : W_q(register_module("W_q", std::make_unique<Linear>(d_model, d_model, gen))),
      W_k(register_module("W_k", std::make_unique<Linear>(d_model, d_model, gen))),
      W_v(register_module("W_v", std::make_unique<Linear>(d_model, d_model, gen))),
      W_o(register_module("W_o", std::make_unique<Linear>(d_model, d_model, gen))),
      num_heads_(num_heads),
      attention_dropout_(attention_dropout),
      gen_(&gen) {
  QKV_CHECK(num_heads > 0 && d_model % num_heads == 0,
            "MultiHeadAttention: d_model " << d_model << " must be divisible by num_heads " << num_heads);
}

Var MultiHeadAttention::forward(const Var& Q, const Var& K, const Var& V, const ops::AttentionMasks& masks,
                                Tensor* weights) const {
  return attend(project(W_q, Q), project(W_k, K), project(W_v, V), masks, weights);  // q (B, H, Tq, dk), k v (B, H, Tk, dk)
}

Var MultiHeadAttention::attend(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks,
                               Tensor* weights) const {
  ops::AttentionDropoutSpec drop;
  if (training() && attention_dropout_ > 0.f) {
    drop.p = attention_dropout_;
    drop.seed = gen_->seed();
    drop.offset = gen_->reserve_rows(static_cast<uint64_t>(q.size(0) * q.size(1) * q.size(2) * k.size(2)), q.size(0));
  }
  const Var attn = fn::attention(q, k, v, masks, drop, weights);  // (B, H, Tq, dk)
  return W_o.forward(fn::combine_heads(attn));           // (B, Tq, D)
}

}  // namespace qkv::nn

namespace qkv::nn {

KVCache KVCache::with_capacity(int64_t N, int64_t num_heads, int64_t capacity, int64_t dk) {
  KVCache c;
  c.k = Tensor::empty(Dims{N, num_heads, capacity, dk});
  c.v = Tensor::empty(Dims{N, num_heads, capacity, dk});
  return c;
}

namespace {
// The first `length` key columns of a mask that covers a cache's capacity.
ops::AttentionMasks first_keys(const ops::AttentionMasks& masks, int64_t length) {
  ops::AttentionMasks m = masks;
  if (m.key_keep.defined()) m.key_keep = m.key_keep.narrow(1, 0, length);
  return m;
}
}  // namespace

void KVCache::reorder(const std::vector<int64_t>& rows) {
  k = ops::gather_rows(k, rows);
  v = ops::gather_rows(v, rows);
}

Var MultiHeadAttention::forward_cached(const Var& x, KVCache& cache, const ops::AttentionMasks& masks,
                                       Tensor* weights) const {
  const int64_t T = x.size(1), end = cache.length + T;
  QKV_CHECK(end <= cache.k.size(2), "attention cache: " << end << " positions exceed its capacity " << cache.k.size(2));
  const Var q = project(W_q, x);  // (N, H, T, dk)
  cache.k.narrow(2, cache.length, T).copy_from(project(W_k, x).value());
  cache.v.narrow(2, cache.length, T).copy_from(project(W_v, x).value());
  cache.length = end;
  return attend(q, Var(cache.k.narrow(2, 0, end)), Var(cache.v.narrow(2, 0, end)), first_keys(masks, end), weights);
}

Var MultiHeadAttention::forward_static(const Var& x, const KVCache& cache, const ops::AttentionMasks& masks,
                                       Tensor* weights) const {
  return attend(project(W_q, x), Var(cache.k), Var(cache.v), masks, weights);
}

KVCache MultiHeadAttention::project_memory(const Var& memory) const {
  KVCache c;
  c.k = project(W_k, memory).value();
  c.v = project(W_v, memory).value();
  c.length = c.k.size(2);
  return c;
}

Tensor MultiHeadAttention::attention_weights(const Var& Q, const Var& K, const ops::AttentionMasks& masks) const {
  NoGradGuard no_grad;
  const Var q = project(W_q, Q), k = project(W_k, K);
  Tensor probs;
  ops::attention_forward(q.value(), k.value(), k.value(), masks, {}, &probs);
  return probs;
}

}  // namespace qkv::nn
