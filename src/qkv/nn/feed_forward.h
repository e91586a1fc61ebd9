// PositionWiseFeedForward as in seed 000: fc2(activation(fc1(x))), activation ReLU (seed) or GELU.
#pragma once
#include "qkv/nn/layers.h"

namespace qkv::nn {

enum class Activation { ReLU, GELU };

class PositionWiseFeedForward : public Module {
 public:
  PositionWiseFeedForward(int64_t d_model, int64_t d_ff, Generator& gen, Activation activation = Activation::ReLU);
  Var forward(const Var& x) const;  // (B, T, D) -> (B, T, D)
  // Recompute the (B, T, d_ff) hidden activation in backward instead of keeping it (saves 4x the
  // memory of a (B, T, D) activation per layer for one extra fc1 forward).
  void set_recompute(bool on) { recompute_ = on; }
  Linear &fc1, &fc2;

 private:
  Var compute(const Var& x) const;
  Activation activation_;
  bool recompute_ = false;
};

}  // namespace qkv::nn
