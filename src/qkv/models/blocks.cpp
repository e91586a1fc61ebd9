#include "qkv/models/blocks.h"

namespace qkv::models {

namespace {
nn::Activation activation_of(const TransformerConfig& c) {
  if (c.activation == "gelu") return nn::Activation::GELU;
  if (c.activation == "gelu_tanh") return nn::Activation::GELUTanh;
  return nn::Activation::ReLU;
}
}  // namespace

std::unique_ptr<nn::LayerNorm> make_norm(const TransformerConfig& c) {
  const ops::LayerNormVariant variant =
      c.layer_norm == "seed003" ? ops::LayerNormVariant::UnbiasedStd : ops::LayerNormVariant::Standard;
  return std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps, variant);
}

std::unique_ptr<nn::PositionWiseFeedForward> make_feed_forward(const TransformerConfig& c, Generator& gen) {
  return std::make_unique<nn::PositionWiseFeedForward>(c.d_model, c.d_ff, gen, activation_of(c), c.ffn_dropout);
}

}  // namespace qkv::models
