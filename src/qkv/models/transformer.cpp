#include "qkv/models/transformer.h"

#include "qkv/ops/ops.h"

#include <cmath>
#include <numeric>
#include <vector>
#include <string>

namespace qkv::models {

namespace {
// The sinusoidal table config.positions names (unused with "relative" and "learned" positions).
std::unique_ptr<nn::PositionalEncoding> make_positional_encoding(const TransformerConfig& c) {
  // fairseq (M2M100, NLLB) numbers positions from padding_idx + 1: qkv's position 0 is its pad_id + 1.
  if (c.positions == "sinusoidal_fairseq")
    return std::make_unique<nn::PositionalEncoding>(ops::sinusoidal_table_fairseq(c.max_seq_length, c.d_model, c.pad_id + 1));
  return std::make_unique<nn::PositionalEncoding>(c.d_model, c.max_seq_length, c.positions == "sinusoidal_halves");
}
}  // namespace

DecoderLayer::DecoderLayer(const TransformerConfig& c, Generator& gen)
    : self_attn(register_module("self_attn", make_attention(c, gen))),
      cross_attn(register_module("cross_attn", make_attention(c, gen))),
      feed_forward(register_module("feed_forward", make_feed_forward(c, gen))),
      norm1(register_module("norm1", make_norm(c))),
      norm2(register_module("norm2", make_norm(c))),
      norm3(register_module("norm3", make_norm(c))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(c.dropout, gen))),
      norm_pos_(c.norm),
      scale_scores_(c.scale_attention_scores) {}

Var DecoderLayer::forward(const Var& x, const Var& enc_output, const ops::AttentionMasks& src_mask,
                          const ops::AttentionMasks& tgt_mask, Tensor* self_weights, Tensor* cross_weights,
                          const Var& position_bias) const {
  Var h = residual(norm_pos_, norm1, dropout, x, [&](const Var& in) {
    return self_attn.forward(in, in, in, tgt_mask, self_weights, position_bias);
  });
  h = residual(norm_pos_, norm2, dropout, h, [&](const Var& in) {
    return cross_attn.forward(in, enc_output, enc_output, src_mask, cross_weights);
  });
  return residual(norm_pos_, norm3, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

Var DecoderLayer::forward_step(const Var& x, LayerCache& cache, const ops::AttentionMasks& src_mask,
                               Tensor* self_weights, Tensor* cross_weights, int64_t rows_per_source,
                               const Var& position_bias) const {
  // The single new query sees every cached position and itself: the no-peek mask of the full forward.
  ops::AttentionMasks self_mask;
  self_mask.scale_scores = scale_scores_;
  Var h = residual(norm_pos_, norm1, dropout, x, [&](const Var& in) {
    return self_attn.forward_cached(in, cache.self, self_mask, self_weights, position_bias);
  });
  h = residual(norm_pos_, norm2, dropout, h,
               [&](const Var& in) {
                 return cross_attn.forward_static(in, cache.cross, src_mask, cross_weights, rows_per_source);
               });
  return residual(norm_pos_, norm3, dropout, h, [&](const Var& in) { return feed_forward.forward(in); });
}

Transformer::Transformer(const TransformerConfig& config, uint64_t seed)
    : Model(config, seed),
      encoder_embedding(register_module("encoder_embedding",
                                        std::make_unique<nn::Embedding>(config.src_vocab_size, config.d_model, gen_))),
      decoder_embedding(register_module("decoder_embedding",
                                        std::make_unique<nn::Embedding>(config.tgt_vocab_size, config.d_model, gen_))),
      positional_encoding(register_module("positional_encoding", make_positional_encoding(config))),
      fc(register_module("fc", std::make_unique<nn::Linear>(config.d_model, config.tgt_vocab_size, gen_,
                                                            config.linear_bias))),
      dropout(register_module("dropout", std::make_unique<nn::Dropout>(config.dropout, gen_))) {
  QKV_CHECK(config.encoder_decoder(), "Transformer: the config is of a" << (config.encoder_only() ? "n " : " ")
                                          << config.architecture << " model, not an encoder-decoder one");
  for (int64_t i = 0; i < config.num_layers; ++i)
    encoder_layers.push_back(&register_module("encoder_layers." + std::to_string(i),
                                              std::make_unique<EncoderLayer>(config, gen_)));
  for (int64_t i = 0; i < config.num_layers; ++i)
    decoder_layers.push_back(&register_module("decoder_layers." + std::to_string(i),
                                              std::make_unique<DecoderLayer>(config, gen_)));
  if (relative_positions()) {
    const auto bias = [&](bool bidirectional) {
      return std::make_unique<nn::RelativePositionBias>(config.relative_attention_num_buckets,
                                                        config.relative_attention_max_distance, config.num_heads,
                                                        config.d_model, bidirectional, gen_);
    };
    encoder_position_bias = &register_module("encoder_position_bias", bias(true));
    decoder_position_bias = &register_module("decoder_position_bias", bias(false));
  }
  if (config.norm == NormPosition::Pre) {
    encoder_norm = &register_module("encoder_norm", make_norm(config));
    decoder_norm = &register_module("decoder_norm", make_norm(config));
  }
  // Registered after the seed's modules, so that models without them keep their parameter order
  // and their random draws.
  if (config.positions == "learned") {
    const auto table = [&] { return std::make_unique<nn::Embedding>(config.max_seq_length, config.d_model, gen_); };
    encoder_position_embedding = &register_module("encoder_position_embedding", table());
    decoder_position_embedding = &register_module("decoder_position_embedding", table());
  }
  if (config.embedding_norm) {
    encoder_embedding_norm = &register_module("encoder_embedding_norm", make_norm(config));
    decoder_embedding_norm = &register_module("decoder_embedding_norm", make_norm(config));
  }
  if (config.tie_output_embedding) {
    fc.tie_weight(decoder_embedding.weight);  // both (V, D)
    scale_tied_table_for_output();
  }
  if (config.share_embeddings) encoder_embedding.tie_weight(decoder_embedding.weight);  // a joint vocabulary
}

// The seed's tables are N(0, 1). As the output layer's weight that makes the first logits' spread
// sqrt(d_model) (16 at d_model 256: a first loss near 75 instead of ln V), which the optimiser spends
// hundreds of steps undoing. A table that is also the output layer is drawn from N(0, 1 / d_model),
// as fairseq draws every table; the draws are the N(0, 1) ones scaled, so the generator's stream
// (and every value drawn after) is unchanged. The paper's sqrt(d_model) on the embedding side is
// config.scale_embeddings (`qkv train --share-all-embeddings` turns it on).
void Transformer::scale_tied_table_for_output() {
  if (nn::random_init_skipped()) return;  // every value is loaded next
  Tensor& table = decoder_embedding.weight.value();
  ops::scale_inplace(table, 1.f / std::sqrt(static_cast<float>(config_.d_model)));
}

std::vector<std::pair<std::string, Tensor>> Transformer::named_buffers() const {
  if (relative_positions() || config_.positions == "learned") return {};  // no sinusoidal table is added
  // The seed registers pe as a persistent buffer of shape (1, max_len, D).
  const Tensor& pe = positional_encoding.pe;
  return {{"positional_encoding.pe", pe.reshape(Dims{1, pe.size(0), pe.size(1)})}};
}

void Transformer::set_recompute_ffn(bool on) {
  for (EncoderLayer* l : encoder_layers) l->feed_forward.set_recompute(on);
  for (DecoderLayer* l : decoder_layers) l->feed_forward.set_recompute(on);
}

Masks Transformer::generate_mask(const Tensor& src, const Tensor& tgt) const {
  Masks m;
  m.src.key_keep = ops::keep_mask(src, config_.pad_id);  // (B, S): (src != 0).unsqueeze(1).unsqueeze(2)
  m.src.fill = config_.mask_fill_value();
  m.src.scale_scores = config_.scale_attention_scores;
  m.tgt.scale_scores = config_.scale_attention_scores;
  if (config_.target_query_mask)
    m.tgt.query_keep = ops::keep_mask(tgt, config_.pad_id);  // (B, T): (tgt != 0).unsqueeze(1).unsqueeze(3)
  m.tgt.causal = true;                                     // & nopeak_mask
  m.tgt.fill = config_.mask_fill_value();
  return m;
}

namespace {
// Positions (B, T) i32 on `device`: column t of every row is first + t.
Tensor position_ids(int64_t B, int64_t T, int64_t first, Device device) {
  std::vector<int32_t> p(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(first + i % T);
  return Tensor::from_ids(Dims{B, T}, p).to(device);
}
}  // namespace

Var Transformer::embed(const nn::Embedding& table, const nn::Embedding* learned_positions, const nn::LayerNorm* norm,
                       const Tensor& ids, int64_t first) const {
  Var e = table.forward(ids);  // (B, T, D)
  if (config_.scale_embeddings) e = fn::scale(e, std::sqrt(static_cast<float>(config_.d_model)));
  const int64_t B = ids.size(0), T = ids.size(1);
  if (learned_positions) e = fn::add(e, learned_positions->forward(position_ids(B, T, first, ids.device())));
  else if (!relative_positions() && first == 0) e = positional_encoding.forward(e);  // checks T against the table
  else if (!relative_positions()) e = fn::add_positional(e, positional_encoding.pe.narrow(0, first, T));
  if (norm) e = norm->forward(e);
  return dropout.forward(e);
}

Var Transformer::output_logits(const Var& x) const {
  if (!config_.scale_decoder_output) return fc.forward(x);
  return fc.forward(fn::scale(x, 1.f / std::sqrt(static_cast<float>(config_.d_model))));
}

namespace {
// Room for one tensor per layer in `weights` (when asked for) and the slot of layer i.
void size_for_layers(std::vector<Tensor>* weights, size_t layers) {
  if (weights) weights->assign(layers, Tensor());
}
Tensor* slot(std::vector<Tensor>* weights, size_t i) { return weights ? &(*weights)[i] : nullptr; }
}  // namespace

Var Transformer::encode(const Tensor& src, const ops::AttentionMasks& src_mask, std::vector<Tensor>* self_weights) const {
  Var x = embed(encoder_embedding, encoder_position_embedding, encoder_embedding_norm, src, 0);
  const int64_t S = src.size(1);
  const Var bias = encoder_position_bias ? encoder_position_bias->forward(0, S, S) : Var();
  size_for_layers(self_weights, encoder_layers.size());
  for (size_t i = 0; i < encoder_layers.size(); ++i)
    x = encoder_layers[i]->forward(x, src_mask, slot(self_weights, i), bias);
  return encoder_norm ? encoder_norm->forward(x) : x;
}

Var Transformer::decode(const Tensor& tgt, const Var& enc_output, const Masks& masks, std::vector<Tensor>* self_weights,
                        std::vector<Tensor>* cross_weights) const {
  Var x = embed(decoder_embedding, decoder_position_embedding, decoder_embedding_norm, tgt, 0);
  const int64_t T = tgt.size(1);
  const Var bias = decoder_position_bias ? decoder_position_bias->forward(0, T, T) : Var();
  size_for_layers(self_weights, decoder_layers.size());
  size_for_layers(cross_weights, decoder_layers.size());
  for (size_t i = 0; i < decoder_layers.size(); ++i)
    x = decoder_layers[i]->forward(x, enc_output, masks.src, masks.tgt, slot(self_weights, i), slot(cross_weights, i),
                                   bias);
  if (decoder_norm) x = decoder_norm->forward(x);
  return output_logits(x);  // (B, T, V)
}

DecoderState Transformer::start_decoding(const Var& enc_output, const Tensor& src, int64_t max_length,
                                         int64_t rows_per_source, nn::KVCacheStorage* kv_storage) const {
  QKV_CHECK(!grad_enabled(), "incremental decoding is for inference: use it under NoGradGuard");
  QKV_CHECK(max_length >= 1 && max_length <= config_.max_seq_length,
            "decoding length " << max_length << " must be in [1, max_seq_length " << config_.max_seq_length << "]");
  DecoderState st;
  st.max_length = max_length;
  QKV_CHECK(rows_per_source >= 1, "start_decoding: rows_per_source " << rows_per_source << " must be at least 1");
  st.src_mask = generate_mask(src, src).src;
  st.rows_per_source = rows_per_source;
  for (int64_t b = 0; b < enc_output.size(0); ++b) st.source_of_row.insert(st.source_of_row.end(), rows_per_source, b);
  const int64_t N = enc_output.size(0) * rows_per_source, H = config_.num_heads, dk = config_.head_size();
  for (size_t i = 0; i < decoder_layers.size(); ++i)
    st.layers.push_back({nn::self_attention_cache(kv_storage, i, N, H, max_length, config_.max_seq_length, dk,
                                                 enc_output.value().device()),
                         decoder_layers[i]->cross_attn.project_memory(enc_output)});
  return st;
}

// Every linear: the encoder's, the decoder's (cross-attention's W_k and W_v included: they project
// the encoder output once per batch) and the output layer.
std::vector<nn::Linear*> Transformer::inference_linears() {
  std::vector<nn::Linear*> out;
  for (EncoderLayer* layer : encoder_layers) add_block_linears(layer->self_attn, layer->feed_forward, out);
  for (DecoderLayer* layer : decoder_layers) {
    add_block_linears(layer->self_attn, layer->feed_forward, out);
    out.insert(out.end(), {&layer->cross_attn.W_q, &layer->cross_attn.W_k, &layer->cross_attn.W_v,
                           &layer->cross_attn.W_o});
  }
  out.push_back(&fc);
  return out;
}

std::vector<nn::Embedding*> Transformer::inference_embeddings() { return {&encoder_embedding, &decoder_embedding}; }

Var Transformer::decode_step(const Tensor& tokens, DecoderState& st, std::vector<Tensor>* self_weights,
                             std::vector<Tensor>* cross_weights) const {
  QKV_CHECK(st.length < st.max_length, "decode_step: all " << st.max_length << " positions are used");
  const int64_t N = tokens.numel(), pos = st.length;
  Var x = embed(decoder_embedding, decoder_position_embedding, decoder_embedding_norm, tokens.reshape(Dims{N, 1}), pos);
  // The new query at position pos over keys [0, pos] (T5: the last row of the full forward's bias).
  const Var bias = decoder_position_bias ? decoder_position_bias->forward(pos, 1, pos + 1) : Var();
  size_for_layers(self_weights, decoder_layers.size());
  size_for_layers(cross_weights, decoder_layers.size());
  for (size_t i = 0; i < decoder_layers.size(); ++i)
    x = decoder_layers[i]->forward_step(x, st.layers[i], st.src_mask, slot(self_weights, i), slot(cross_weights, i),
                                        st.rows_per_source, bias);
  if (decoder_norm) x = decoder_norm->forward(x);
  st.length += 1;
  return fn::reshape(output_logits(x), Dims{N, config_.tgt_vocab_size});  // (N, V)
}

void Transformer::reorder(DecoderState& st, const std::vector<int64_t>& rows) const {
  const int64_t R = st.rows_per_source, old_rows = static_cast<int64_t>(st.source_of_row.size());
  QKV_CHECK(static_cast<int64_t>(rows.size()) % R == 0,
            "reorder: " << rows.size() << " rows do not make groups of " << R << " (the beams of a sentence)");
  std::vector<int64_t> sources(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    QKV_CHECK(rows[i] >= 0 && rows[i] < old_rows, "reorder: row " << rows[i] << " outside [0, " << old_rows << ")");
    QKV_CHECK(rows[i] / R == rows[i - i % R] / R,
              "reorder: new row " << i << " comes from old group " << rows[i] / R << ", the others of its group from "
                                  << rows[i - i % R] / R);
    sources[i] = st.source_of_row[static_cast<size_t>(rows[i])];
  }
  // The encoder's keys and values, one row per group. A group that keeps its source keeps them,
  // whichever old group its rows continue.
  const int64_t groups = static_cast<int64_t>(rows.size()) / R, old_groups = old_rows / R;
  std::vector<int64_t> cross_rows(static_cast<size_t>(groups));
  bool cross_unchanged = groups == old_groups;
  for (int64_t g = 0; g < groups; ++g) {
    const bool same = g < old_groups && st.source_of_row[static_cast<size_t>(g * R)] == sources[static_cast<size_t>(g * R)];
    cross_rows[g] = same ? g : rows[g * R] / R;
    cross_unchanged = cross_unchanged && same;
  }
  for (LayerCache& c : st.layers) {
    c.self.reorder(rows);
    if (!cross_unchanged) c.cross.reorder_gathering(cross_rows);
  }
  if (!cross_unchanged && st.src_mask.key_keep.defined())
    st.src_mask.key_keep = ops::gather_rows(st.src_mask.key_keep, cross_rows);
  st.source_of_row = std::move(sources);
}

Var Transformer::forward(const Tensor& src, const Tensor& tgt) const {
  QKV_CHECK(src.dim() == 2 && tgt.dim() == 2 && src.size(0) == tgt.size(0),
            "Transformer: src " << src.shape() << " and tgt " << tgt.shape() << " must be (B, S) and (B, T)");
  const Masks masks = generate_mask(src, tgt);
  return decode(tgt, encode(src, masks.src, nullptr), masks, nullptr, nullptr);
}

}  // namespace qkv::models
