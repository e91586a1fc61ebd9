// PositionWiseFeedForward: fc2(activation(fc1(x))) as in seed 000, activation ReLU (seed), GELU,
// GELU's tanh approximation or SiLU (Marian's swish); with dropout > 0, fc2(dropout(activation(fc1(x)))) as seed 003's
// FeedForward (linear2(dropout(relu(linear1(x))))).
#pragma once
#include "qkv/nn/layers.h"

namespace qkv::nn {

using Activation = ops::Activation;

class PositionWiseFeedForward : public Module {
 public:
  // gated: fc2(activation(fc1(x)) * fc_up(x)) (T5 v1.1's gated-gelu; fc_up is registered only then).
  // bias: the linears have biases (T5's have none).
  PositionWiseFeedForward(int64_t d_model, int64_t d_ff, Generator& gen, Activation activation = Activation::ReLU,
                          float dropout = 0.f, bool gated = false, bool bias = true);
  // (B, T, D) -> (B, T, D)
  Var forward(const Var& x) const;
  // Recompute the (B, T, d_ff) hidden activation in backward instead of keeping it (saves 4x the
  // memory of a (B, T, D) activation per layer for one extra fc1 forward).
  void set_recompute(bool on) { recompute_ = on; }
  Linear &fc1, &fc2;
  Dropout& dropout;  // on the hidden activation
  Linear* fc_up = nullptr;  // gated only: the linear branch multiplied into the activated one

 private:
  Var compute(const Var& x, const Dropout::Mask& mask) const;
  Activation activation_;
  bool recompute_ = false;
};

}  // namespace qkv::nn
