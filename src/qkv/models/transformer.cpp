#include "qkv/models/transformer.h"

#include <cmath>
#include <string>

namespace qkv::models {

namespace {
nn::Activation activation_of(const TransformerConfig& c) {
  return c.activation == "gelu" ? nn::Activation::GELU : nn::Activation::ReLU;
}
}  // namespace

EncoderLayer::EncoderLayer(const TransformerConfig& c, Generator& gen)
    : self_attn(register_module("self_attn", std::make_unique<nn::MultiHeadAttention>(c.d_model, c.num_heads, gen,
                                                                                      c.attention_dropout))),
      feed_forward(register_module("feed_forward", std::make_unique<nn::PositionWiseFeedForward>(
                                                       c.d_model, c.d_ff, gen, activation_of(c)))),
      norm1(register_module("norm1", std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps))),
      norm2(register_module("norm2", std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(c.dropout, gen))),
      norm_pos_(c.norm) {}

Var EncoderLayer::forward(const Var& x, const ops::AttentionMasks& src_mask) const {
  Var h = residual(norm_pos_, norm1, dropout, x, [&](const Var& in) { return self_attn.forward(in, in, in, src_mask); });
  return residual(norm_pos_, norm2, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

DecoderLayer::DecoderLayer(const TransformerConfig& c, Generator& gen)
    : self_attn(register_module("self_attn", std::make_unique<nn::MultiHeadAttention>(c.d_model, c.num_heads, gen,
                                                                                      c.attention_dropout))),
      cross_attn(register_module("cross_attn", std::make_unique<nn::MultiHeadAttention>(c.d_model, c.num_heads, gen,
                                                                                        c.attention_dropout))),
      feed_forward(register_module("feed_forward", std::make_unique<nn::PositionWiseFeedForward>(
                                                       c.d_model, c.d_ff, gen, activation_of(c)))),
      norm1(register_module("norm1", std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps))),
      norm2(register_module("norm2", std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps))),
      norm3(register_module("norm3", std::make_unique<nn::LayerNorm>(c.d_model, c.layer_norm_eps))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(c.dropout, gen))),
      norm_pos_(c.norm) {}

Var DecoderLayer::forward(const Var& x, const Var& enc_output, const ops::AttentionMasks& src_mask,
                          const ops::AttentionMasks& tgt_mask) const {
  Var h = residual(norm_pos_, norm1, dropout, x, [&](const Var& in) { return self_attn.forward(in, in, in, tgt_mask); });
  h = residual(norm_pos_, norm2, dropout, h,
               [&](const Var& in) { return cross_attn.forward(in, enc_output, enc_output, src_mask); });
  return residual(norm_pos_, norm3, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

Transformer::Transformer(const TransformerConfig& config, uint64_t seed)
    : config_(config),
      gen_(seed),
      encoder_embedding(register_module("encoder_embedding",
                                        std::make_unique<nn::Embedding>(config.src_vocab_size, config.d_model, gen_))),
      decoder_embedding(register_module("decoder_embedding",
                                        std::make_unique<nn::Embedding>(config.tgt_vocab_size, config.d_model, gen_))),
      positional_encoding(register_module(
          "positional_encoding", std::make_unique<nn::PositionalEncoding>(config.d_model, config.max_seq_length))),
      fc(register_module("fc", std::make_unique<nn::Linear>(config.d_model, config.tgt_vocab_size, gen_))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(config.dropout, gen_))) {
  config.validate();
  for (int64_t i = 0; i < config.num_layers; ++i)
    encoder_layers.push_back(&register_module("encoder_layers." + std::to_string(i),
                                              std::make_unique<EncoderLayer>(config, gen_)));
  for (int64_t i = 0; i < config.num_layers; ++i)
    decoder_layers.push_back(&register_module("decoder_layers." + std::to_string(i),
                                              std::make_unique<DecoderLayer>(config, gen_)));
  if (config.norm == NormPosition::Pre) {
    encoder_norm = &register_module("encoder_norm", std::make_unique<nn::LayerNorm>(config.d_model, config.layer_norm_eps));
    decoder_norm = &register_module("decoder_norm", std::make_unique<nn::LayerNorm>(config.d_model, config.layer_norm_eps));
  }
  if (config.tie_output_embedding) fc.tie_weight(decoder_embedding.weight);  // both (V, D)
}

void Transformer::set_recompute_ffn(bool on) {
  for (EncoderLayer* l : encoder_layers) l->feed_forward.set_recompute(on);
  for (DecoderLayer* l : decoder_layers) l->feed_forward.set_recompute(on);
}

Masks Transformer::generate_mask(const Tensor& src, const Tensor& tgt) const {
  Masks m;
  m.src.key_keep = ops::keep_mask(src, config_.pad_id);  // (B, S): (src != 0).unsqueeze(1).unsqueeze(2)
  m.src.fill = config_.mask_fill_value();
  m.tgt.query_keep = ops::keep_mask(tgt, config_.pad_id);  // (B, T): (tgt != 0).unsqueeze(1).unsqueeze(3)
  m.tgt.causal = true;                                     // & nopeak_mask
  m.tgt.fill = config_.mask_fill_value();
  return m;
}

Var Transformer::embed(const nn::Embedding& table, const Tensor& ids) const {
  Var e = table.forward(ids);  // (B, T, D)
  if (config_.scale_embeddings) e = fn::scale(e, std::sqrt(static_cast<float>(config_.d_model)));
  return dropout.forward(positional_encoding.forward(e));
}

Var Transformer::encode(const Tensor& src, const ops::AttentionMasks& src_mask) const {
  Var x = embed(encoder_embedding, src);
  for (const EncoderLayer* layer : encoder_layers) x = layer->forward(x, src_mask);
  return encoder_norm ? encoder_norm->forward(x) : x;
}

Var Transformer::decode(const Tensor& tgt, const Var& enc_output, const Masks& masks) const {
  Var x = embed(decoder_embedding, tgt);
  for (const DecoderLayer* layer : decoder_layers) x = layer->forward(x, enc_output, masks.src, masks.tgt);
  if (decoder_norm) x = decoder_norm->forward(x);
  return fc.forward(x);  // (B, T, V)
}

Var Transformer::forward(const Tensor& src, const Tensor& tgt) const {
  QKV_CHECK(src.dim() == 2 && tgt.dim() == 2 && src.size(0) == tgt.size(0),
            "Transformer: src " << src.shape() << " and tgt " << tgt.shape() << " must be (B, S) and (B, T)");
  const Masks masks = generate_mask(src, tgt);
  return decode(tgt, encode(src, masks.src), masks);
}

}  // namespace qkv::models
