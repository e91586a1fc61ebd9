// MultiHeadAttention as in seed 000: project Q, K, V, split into heads, scaled dot-product
// attention with masks, combine heads, project with W_o.
#pragma once
#include "qkv/nn/layers.h"

namespace qkv::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen, float attention_dropout = 0.f);

  // Q (B, Tq, D); K, V (B, Tk, D) -> (B, Tq, D). masks: key padding / query rows / causal.
  Var forward(const Var& Q, const Var& K, const Var& V, const ops::AttentionMasks& masks) const;

  // The two halves of forward, for incremental decoding where keys and values are cached:
  // project: (B, T, D) -> split heads of W(x), (B, H, T, dk);
  // attend: W_o(combine_heads(attention(q, k, v))) -> (B, Tq, D).
  Var project(const Linear& W, const Var& x) const { return fn::split_heads(W.forward(x), num_heads_); }
  Var attend(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks) const;

  int64_t num_heads() const { return num_heads_; }
  Linear &W_q, &W_k, &W_v, &W_o;

 private:
  int64_t d_model_, num_heads_;
  float attention_dropout_;
  Generator* gen_;
};

}  // namespace qkv::nn
