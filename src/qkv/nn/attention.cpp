#include "qkv/nn/attention.h"

namespace qkv::nn {

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen, float attention_dropout)
    : W_q(register_module("W_q", std::make_unique<Linear>(d_model, d_model, gen))),
      W_k(register_module("W_k", std::make_unique<Linear>(d_model, d_model, gen))),
      W_v(register_module("W_v", std::make_unique<Linear>(d_model, d_model, gen))),
      W_o(register_module("W_o", std::make_unique<Linear>(d_model, d_model, gen))),
      d_model_(d_model),
      num_heads_(num_heads),
      attention_dropout_(attention_dropout),
      gen_(&gen) {
  QKV_CHECK(num_heads > 0 && d_model % num_heads == 0,
            "MultiHeadAttention: d_model " << d_model << " must be divisible by num_heads " << num_heads);
}

Var MultiHeadAttention::forward(const Var& Q, const Var& K, const Var& V, const ops::AttentionMasks& masks) const {
  return attend(project(W_q, Q), project(W_k, K), project(W_v, V), masks);  // q (B, H, Tq, dk), k v (B, H, Tk, dk)
}

Var MultiHeadAttention::attend(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks) const {
  ops::AttentionDropoutSpec drop;
  if (training() && attention_dropout_ > 0.f) {
    drop.p = attention_dropout_;
    drop.seed = gen_->seed();
    drop.offset = gen_->reserve(static_cast<uint64_t>(q.size(0) * q.size(1) * q.size(2) * k.size(2)));
  }
  const Var attn = fn::attention(q, k, v, masks, drop);  // (B, H, Tq, dk)
  return W_o.forward(fn::combine_heads(attn));           // (B, Tq, D)
}

}  // namespace qkv::nn
