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

  int64_t num_heads() const { return num_heads_; }
  Linear &W_q, &W_k, &W_v, &W_o;

 private:
  int64_t d_model_, num_heads_;
  float attention_dropout_;
  Generator* gen_;
};

}  // namespace qkv::nn
