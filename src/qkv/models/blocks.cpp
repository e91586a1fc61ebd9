#include "qkv/models/blocks.h"

#include <cmath>

#include "qkv/ops/ops.h"

namespace qkv::models {

namespace {
nn::Activation activation_of(const TransformerConfig& c) {
  if (c.activation == "gelu") return nn::Activation::GELU;
  if (c.activation == "gelu_tanh") return nn::Activation::GELUTanh;
  if (c.activation == "silu") return nn::Activation::SiLU;
  return nn::Activation::ReLU;
}
}  // namespace

std::unique_ptr<nn::LayerNorm> make_norm(const TransformerConfig& c) {
  const ops::LayerNormVariant variant = c.layer_norm == "seed003" ? ops::LayerNormVariant::UnbiasedStd
                                       : c.layer_norm == "rms"   ? ops::LayerNormVariant::RMS
                                                                 : ops::LayerNormVariant::Standard;
  return std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps, variant);
}

std::unique_ptr<nn::PositionWiseFeedForward> make_feed_forward(const TransformerConfig& c, Generator& gen) {
  return std::make_unique<nn::PositionWiseFeedForward>(c.d_model, c.d_ff, gen, activation_of(c), c.ffn_dropout,
                                                       c.gated_feed_forward, c.linear_bias);
}

void add_block_linears(nn::MultiHeadAttention& self_attn, nn::PositionWiseFeedForward& feed_forward,
                       std::vector<nn::Linear*>& out) {
  out.insert(out.end(), {&self_attn.W_q, &self_attn.W_k, &self_attn.W_v, &self_attn.W_o, &feed_forward.fc1,
                         &feed_forward.fc2});
  if (feed_forward.fc_up) out.push_back(feed_forward.fc_up);
}

std::unique_ptr<nn::MultiHeadAttention> make_attention(const TransformerConfig& c, Generator& gen) {
  auto attention = std::make_unique<nn::MultiHeadAttention>(c.d_model, c.num_heads, gen, c.attention_dropout,
                                                            c.linear_bias, c.attention_width());
  if (!c.scale_attention_scores && !nn::random_init_skipped()) {
    // Unscaled scores (T5): the 1/sqrt(d_head) the scores lack goes into the query projection's first
    // values, as T5 initializes it (std (d_model d_head)^-1/2 there). With nn.Linear's draw alone the
    // first scores were sqrt(d_head) times a scaled model's, and a model trained from scratch learned
    // far more slowly (docs/runs.md, T5 section). Skipped where a checkpoint's weights come next.
    ops::scale_inplace(attention->W_q.weight.value(), 1.f / std::sqrt(static_cast<float>(c.head_size())));
  }
  return attention;
}

EncoderLayer::EncoderLayer(const TransformerConfig& c, Generator& gen)
    : self_attn(register_module("self_attn", make_attention(c, gen))),
      feed_forward(register_module("feed_forward", make_feed_forward(c, gen))),
      norm1(register_module("norm1", make_norm(c))),
      norm2(register_module("norm2", make_norm(c))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(c.dropout, gen))),
      norm_pos_(c.norm) {}

Var EncoderLayer::forward(const Var& x, const ops::AttentionMasks& src_mask, Tensor* weights,
                          const Var& position_bias) const {
  Var h = residual(norm_pos_, norm1, dropout, x,
                   [&](const Var& in) { return self_attn.forward(in, in, in, src_mask, weights, position_bias); });
  return residual(norm_pos_, norm2, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

}  // namespace qkv::models
