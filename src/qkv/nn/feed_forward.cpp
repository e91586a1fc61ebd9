#include "qkv/nn/feed_forward.h"

#include "qkv/autograd/checkpoint.h"

namespace qkv::nn {

PositionWiseFeedForward::PositionWiseFeedForward(int64_t d_model, int64_t d_ff, Generator& gen, Activation activation)
    : fc1(register_module("fc1", std::make_unique<Linear>(d_model, d_ff, gen))),
      fc2(register_module("fc2", std::make_unique<Linear>(d_ff, d_model, gen))),
      activation_(activation) {}

Var PositionWiseFeedForward::compute(const Var& x) const {
  const Var h = fc1.forward(x);  // (B, T, d_ff)
  return fc2.forward(activation_ == Activation::ReLU ? fn::relu(h) : fn::gelu(h));
}

Var PositionWiseFeedForward::forward(const Var& x) const {
  if (!recompute_ || !training()) return compute(x);
  return fn::checkpoint([this](const Var& in) { return compute(in); }, x);
}

}  // namespace qkv::nn
