// PositionWiseFeedForward as in seed 000: fc2(activation(fc1(x))), activation ReLU (seed) or GELU.
#pragma once
#include "qkv/nn/layers.h"

namespace qkv::nn {

enum class Activation { ReLU, GELU };

class PositionWiseFeedForward : public Module {
 public:
  PositionWiseFeedForward(int64_t d_model, int64_t d_ff, Generator& gen, Activation activation = Activation::ReLU);
  Var forward(const Var& x) const;  // (B, T, D) -> (B, T, D)
  Linear &fc1, &fc2;

 private:
  Activation activation_;
};

}  // namespace qkv::nn
