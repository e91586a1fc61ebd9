// Pieces every family builds its layers from, as the config asks: the residual sub-layer, the
// norm and the feed-forward block.
#pragma once
#include <memory>

#include "qkv/models/config.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/layers.h"

namespace qkv::models {

// Post-LN norm(x + dropout(f(x))) (seed 000) or pre-LN x + dropout(f(norm(x))) (GPT-2, and the
// seed model's "pre" option).
template <class F>
Var residual(NormPosition pos, const nn::LayerNorm& norm, const nn::Dropout& dropout, const Var& x, F&& sublayer) {
  if (pos == NormPosition::Post) return norm.forward_sum(x, dropout.forward(sublayer(x)));
  return fn::add(x, dropout.forward(sublayer(norm.forward(x))));
}

// LayerNorm of d_model with the config's eps and variant (nn.LayerNorm or seed 003's).
std::unique_ptr<nn::LayerNorm> make_norm(const TransformerConfig& c);
// MultiHeadAttention of the config's size, attention dropout and linear_bias.
std::unique_ptr<nn::MultiHeadAttention> make_attention(const TransformerConfig& c, Generator& gen);
// fc2(activation(fc1(x))) with the config's activation and ffn_dropout (gated and bias-free as it says).
std::unique_ptr<nn::PositionWiseFeedForward> make_feed_forward(const TransformerConfig& c, Generator& gen);

// Appends a block's self-attention projections (W_q, W_k, W_v, W_o) and feed-forward (fc1, fc2) to
// `out`: the linears inference multiplies with in every family's blocks (Model::inference_linears).
void add_block_linears(nn::MultiHeadAttention& self_attn, nn::PositionWiseFeedForward& feed_forward,
                       std::vector<nn::Linear*>& out);

// Self-attention then feed-forward, each a residual sub-layer: the seed's encoder layer, and
// BERT's (post-LN) block.
//   x = norm1(x + dropout(self_attn(x, x, x, mask)));  x = norm2(x + dropout(feed_forward(x)))
class EncoderLayer : public nn::Module {
 public:
  EncoderLayer(const TransformerConfig& c, Generator& gen);
  // (B, S, D) -> (B, S, D); weights, when given, receives the self-attention weights (B, H, S, S).
  // position_bias: T5's relative position bias (S, S, H), or undefined.
  Var forward(const Var& x, const ops::AttentionMasks& src_mask, Tensor* weights = nullptr,
              const Var& position_bias = Var()) const;
  nn::MultiHeadAttention& self_attn;
  nn::PositionWiseFeedForward& feed_forward;
  nn::LayerNorm &norm1, &norm2;
  nn::Dropout& dropout;

 private:
  NormPosition norm_pos_;
};

}  // namespace qkv::models
