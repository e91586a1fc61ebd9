// The encoder-decoder Transformer of seed 000, module for module:
//   EncoderLayer:  x = norm1(x + dropout(self_attn(x, x, x, src_mask)))
//                  x = norm2(x + dropout(feed_forward(x)))
//   DecoderLayer:  x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)))
//                  x = norm2(x + dropout(cross_attn(x, enc, enc, src_mask)))
//                  x = norm3(x + dropout(feed_forward(x)))
//   Transformer:   logits = fc(decoder(dropout(pe(emb(tgt))), encoder(dropout(pe(emb(src))))))
// Masks as the seed's generate_mask: src_mask hides padding keys (src == pad); tgt_mask hides
// padding *query rows* (tgt == pad) and future keys (no-peek). Options (pre-LN, GELU or its tanh
// approximation, seed 003's LayerNorm, dropout inside the feed-forward, scaled or tied embeddings,
// -inf fill) come from TransformerConfig and default to the seed.
#pragma once
#include <memory>
#include <vector>

#include "qkv/models/config.h"
#include "qkv/models/model.h"
#include "qkv/models/blocks.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/position_bias.h"

namespace qkv::models {

// Per decoder layer state of incremental decoding (inference only): the caches of its two attentions.
struct LayerCache {
  nn::KVCache self;   // (N, H, max_len, dk): keys / values of every position decoded so far
  nn::KVCache cross;  // (N / rows_per_source, H, S, dk): the encoder output projected once
};

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const TransformerConfig& c, Generator& gen);
  // x (B, T, D), enc_output (B, S, D) -> (B, T, D). self_weights / cross_weights, when given,
  // receive the attention weights (B, H, T, T) / (B, H, T, S).
  // position_bias: T5's relative position bias of the self-attention (T, T, H), or undefined.
  Var forward(const Var& x, const Var& enc_output, const ops::AttentionMasks& src_mask,
              const ops::AttentionMasks& tgt_mask, Tensor* self_weights = nullptr, Tensor* cross_weights = nullptr,
              const Var& position_bias = Var()) const;
  // One position: x (N, 1, D) after the cached ones, attending to them and to itself; the weights
  // (N, H, 1, positions so far) and (N, H, 1, S) on request.
  // rows_per_source: see DecoderState (the cross cache holds one row per group of that many rows).
  // position_bias: (1, positions so far, H) for the new position, or undefined.
  Var forward_step(const Var& x, LayerCache& cache, const ops::AttentionMasks& src_mask, Tensor* self_weights = nullptr,
                   Tensor* cross_weights = nullptr, int64_t rows_per_source = 1,
                   const Var& position_bias = Var()) const;
  nn::MultiHeadAttention &self_attn, &cross_attn;
  nn::PositionWiseFeedForward& feed_forward;
  nn::LayerNorm &norm1, &norm2, &norm3;
  nn::Dropout& dropout;

 private:
  NormPosition norm_pos_;
  bool scale_scores_;  // the config's scale_attention_scores, for the cached steps' self-attention
};

// Incremental decoding state for N sequences (N = sentences x beam).
// Rows come in groups of rows_per_source (the beams of a sentence: rows g R .. g R + R - 1) that
// decode the same source; the encoder's keys and values and the source mask are kept once per group.
struct DecoderState {
  std::vector<LayerCache> layers;
  ops::AttentionMasks src_mask;  // key padding of each group's source
  int64_t length = 0;            // positions decoded so far
  int64_t max_length = 0;
  // The source (row of start_decoding's batch) each row decodes: rows of one source share the
  // cross-attention keys and values, so a reordering among them leaves those alone.
  std::vector<int64_t> source_of_row;
  int64_t rows_per_source = 1;
};

struct Masks {
  ops::AttentionMasks src;  // key padding of the source
  ops::AttentionMasks tgt;  // query padding of the target + no-peek
};

// The encoder-decoder family (sequence-to-sequence): encode, start decoding, step, reorder.
class Transformer : public Model {
 public:
  // Parameters are initialised from `seed` (PyTorch's default schemes); dropout draws from the
  // model's generator, whose state is part of a training checkpoint.
  Transformer(const TransformerConfig& config, uint64_t seed);

  // src (B, S), tgt (B, T) i32 ids -> logits (B, T, tgt_vocab_size)
  Var forward(const Tensor& src, const Tensor& tgt) const;
  Masks generate_mask(const Tensor& src, const Tensor& tgt) const;
  // Attention weights on request (for pictures; null, the default, costs nothing): one tensor per
  // layer, softmax rows over the keys (masked keys get 0).
  //   encode: self_weights (B, H, S, S);  decode: self_weights (B, H, T, T), cross_weights (B, H, T, S).
  // Without gradients, under a compute type (Model::set_compute_type), the linears multiply with
  // their inference forms.
  Var encode(const Tensor& src, const ops::AttentionMasks& src_mask, std::vector<Tensor>* self_weights = nullptr) const;  // (B, S, D)
  Var decode(const Tensor& tgt, const Var& enc_output, const Masks& masks, std::vector<Tensor>* self_weights = nullptr,
             std::vector<Tensor>* cross_weights = nullptr) const;  // logits

  Var teacher_forced_logits(const Tensor& src, const Tensor& input) const override {
    return forward(src, input);
  }
  std::vector<std::pair<std::string, Tensor>> named_buffers() const override;
  void set_recompute_ffn(bool on) override;
  // Incremental decoding: encode once, then one position per call with cached keys and values.
  // start_decoding takes the encoder output (B, S, D) and the sources (B, S) it came from, and
  // decodes rows_per_source rows of each (beam search's beams): N = B x rows_per_source rows. The
  // steps run in the model's compute type (Model::set_compute_type; float32 weights through BLAS
  // without one). kv_storage: self-attention key/value storage kept by a caller that decodes many
  // batches (nn::KVCacheStorage); null: each state allocates its own.
  DecoderState start_decoding(const Var& enc_output, const Tensor& src, int64_t max_length,
                              int64_t rows_per_source = 1, nn::KVCacheStorage* kv_storage = nullptr) const;
  // tokens (N) i32 at position state.length -> logits (N, V) for the next position. The weights of
  // this position, per layer, on request: self (N, H, 1, state.length + 1), cross (N, H, 1, S).
  Var decode_step(const Tensor& tokens, DecoderState& state, std::vector<Tensor>* self_weights = nullptr,
                  std::vector<Tensor>* cross_weights = nullptr) const;
  // Keeps / duplicates the sequences `rows` (beam search reordering, dropping finished sentences):
  // row i of the new state is row rows[i] of the old one. The rows of a new group must all come from
  // one old group. Copies only what changes: the decoded positions of rows that move, and the
  // encoder's keys and values only where a group's source changes.
  void reorder(DecoderState& state, const std::vector<int64_t>& rows) const;

  nn::Embedding &encoder_embedding, &decoder_embedding;
  nn::PositionalEncoding& positional_encoding;
  std::vector<EncoderLayer*> encoder_layers;
  std::vector<DecoderLayer*> decoder_layers;
  nn::Linear& fc;
  nn::Dropout& dropout;
  nn::LayerNorm* encoder_norm = nullptr;  // pre-LN only: the final norms of each stack
  nn::LayerNorm* decoder_norm = nullptr;
  // positions "relative" only (T5): each stack's self-attention bias, shared by its layers.
  nn::RelativePositionBias* encoder_position_bias = nullptr;
  nn::RelativePositionBias* decoder_position_bias = nullptr;
  // positions "learned" only (BART): each stack's table, row p for position p.
  nn::Embedding* encoder_position_embedding = nullptr;
  nn::Embedding* decoder_position_embedding = nullptr;
  // embedding_norm only (BART's layernorm_embedding): each stack's norm of its embeddings.
  nn::LayerNorm* encoder_embedding_norm = nullptr;
  nn::LayerNorm* decoder_embedding_norm = nullptr;

 private:
  // Token table (scaled when configured), plus positions from `first` on, through the stack's
  // embedding norm when there is one, then dropout: the input of a stack's first layer.
  Var embed(const nn::Embedding& table, const nn::Embedding* learned_positions, const nn::LayerNorm* norm,
            const Tensor& ids, int64_t first) const;
  // The decoder's last hidden state (after its final norm) -> logits, with T5's output scaling.
  Var output_logits(const Var& x) const;
  bool relative_positions() const { return config_.positions == "relative"; }
  std::vector<nn::Linear*> inference_linears() override;
  std::vector<nn::Embedding*> inference_embeddings() override;
  void scale_tied_table_for_output();  // the decoder table, tied to fc: drawn N(0, 1 / d_model)
};

}  // namespace qkv::models
