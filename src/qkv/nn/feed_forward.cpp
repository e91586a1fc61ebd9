#include "qkv/nn/feed_forward.h"

#include "qkv/autograd/checkpoint.h"

namespace qkv::nn {

PositionWiseFeedForward::PositionWiseFeedForward(int64_t d_model, int64_t d_ff, Generator& gen, Activation activation,
                                                 float dropout_p, bool gated, bool bias)
    : fc1(register_module("fc1", std::make_unique<Linear>(d_model, d_ff, gen, bias))),
      fc2(register_module("fc2", std::make_unique<Linear>(d_ff, d_model, gen, bias))),
      dropout(register_module("dropout", std::make_unique<Dropout>(dropout_p, gen))),
      activation_(activation) {
  if (gated) fc_up = &register_module("fc_up", std::make_unique<Linear>(d_model, d_ff, gen, bias));
}

Var PositionWiseFeedForward::compute(const Var& x, const Dropout::Mask& mask) const {
  const Var h = fc1.forward(x);  // (B, T, d_ff)
  // At inference, one op: an int8 fc2 applies the activation to each row as it quantizes it.
  if (!fc_up && !mask.active && fc2.uses_inference_weight(h))
    return Var(ops::activation_linear_forward(h.value(), activation_, fc2.inference_weight(),
                                              fc2.bias.defined() ? fc2.bias.value() : Tensor()));
  Var a;
  switch (activation_) {
    case Activation::ReLU: a = fn::relu(h); break;
    case Activation::GELU: a = fn::gelu(h); break;
    case Activation::GELUTanh: a = fn::gelu_tanh(h); break;
    case Activation::SiLU: a = fn::silu(h); break;
  }
  if (fc_up) a = fn::mul(a, fc_up->forward(x));
  // fc2's input is used by nothing else, except ReLU's output without dropout: relu's backward keeps it.
  const bool kept_by_relu = activation_ == Activation::ReLU && !fc_up && !mask.active;
  return fc2.forward(dropout.apply(a, mask), kept_by_relu ? fn::InputUse::Shared : fn::InputUse::LastUse);
}

Var PositionWiseFeedForward::forward(const Var& x) const {
  // The mask is drawn here, once: the recomputation in backward must apply the same one.
  const Dropout::Mask mask = dropout.draw(x.value().numel() / x.size(-1) * fc1.weight.size(0), x.size(0));
  if (!recompute_ || !training()) return compute(x, mask);
  return fn::checkpoint([this, mask](const Var& in) { return compute(in, mask); }, x, parameters());
}

}  // namespace qkv::nn
