// The encoder-only family (BERT), an encoder: hidden states of every token, and the heads that
// read them.
//   x = dropout(embedding_norm(tok(ids) + type(type_ids) + pos(positions)))   learned positions
//   block (post-LN, the seed's EncoderLayer): x = norm1(x + drop(attn(x))); x = norm2(x + drop(ffn(x)))
//   pooled   = tanh(pooler(x[:, 0]))                                           (pooler true)
//   mlm      = mlm_head.norm(gelu(mlm_head.transform(x))) @ tok^T + mlm_head.decoder.bias  (mlm_head true)
//   classify = classifier(dropout(pooled))                                     (labels non-empty)
// Parameter names (model.safetensors):
//   token_embedding.weight (V, D), position_embedding.weight (max_seq_length, D) [learned],
//   positional_encoding.pe (1, max_seq_length, D) [sinusoidal, a buffer],
//   token_type_embedding.weight (type_vocab_size, D), embedding_norm.{weight, bias},
//   layers.N.{self_attn.{W_q, W_k, W_v, W_o}, feed_forward.{fc1, fc2}, norm1, norm2}.{weight, bias},
//   pooler.{weight, bias}, mlm_head.{transform, norm}.{weight, bias}, mlm_head.decoder.{weight, bias}
//   (decoder.weight is the token embedding when tied), classifier.{weight, bias} (labels, D).
// Initialisation as BERT's: weights and embeddings N(0, 0.02), the padding row of the token
// embedding 0, biases 0, norms 1 / 0; like nn.Embedding(padding_idx=pad_id), lookups of the padding
// id pass no gradient.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/models/blocks.h"
#include "qkv/models/model.h"

namespace qkv::models {

// BERT's BertLMPredictionHead: a dense layer with GELU and a LayerNorm before the output projection.
class MaskedLMHead : public nn::Module {
 public:
  MaskedLMHead(const TransformerConfig& c, Generator& gen);
  Var forward(const Var& hidden) const;  // (..., D) -> (..., V)
  nn::Linear& transform;
  nn::LayerNorm& norm;
  nn::Linear& decoder;
};

// One batch of token sequences for the encoder.
struct EncoderInput {
  Tensor ids;       // (B, T) i32, each row [CLS] ... [SEP] then padding
  Tensor key_keep;  // (B, T) i32: 1 on real tokens, 0 on padding; undefined: no padding
  Tensor type_ids;  // (B, T) i32 token types; undefined: all 0
};

class EncoderModel : public Model {
 public:
  EncoderModel(const TransformerConfig& config, uint64_t seed);

  // Hidden states (B, T, D) after the last block.
  Var encode(const EncoderInput& input) const;
  // tanh(pooler(hidden[:, 0])) (B, D); needs the pooler.
  Var pool(const Var& hidden) const;
  // Masked-LM logits (B, T, V) of every position; needs the masked-LM head.
  Var mlm_logits(const Var& hidden) const;
  // Classification logits (B, labels) of each sequence; needs the classifier (labels).
  Var classify(const Var& hidden) const;

  // Masked-LM logits of `input` (B, T) with padding (pad_id) keys masked; `src` is ignored.
  Var teacher_forced_logits(const Tensor& src, const Tensor& input) const override;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const override;
  void set_recompute_ffn(bool on) override;

  nn::Embedding& token_embedding;
  nn::Embedding* position_embedding = nullptr;            // learned positions
  nn::PositionalEncoding* positional_encoding = nullptr;  // sinusoidal positions
  nn::Embedding* token_type_embedding = nullptr;          // type_vocab_size > 0
  nn::LayerNorm* embedding_norm = nullptr;
  std::vector<EncoderLayer*> layers;
  nn::Linear* pooler = nullptr;
  MaskedLMHead* mlm_head = nullptr;
  nn::Linear* classifier = nullptr;
  nn::Dropout* dropout = nullptr;

 private:
  Var embed(const EncoderInput& input) const;
  // The blocks' linears (the task heads stay float32) and every embedding table.
  std::vector<nn::Linear*> inference_linears() override;
  std::vector<nn::Embedding*> inference_embeddings() override;
  void init_bert_weights();
};

}  // namespace qkv::models
