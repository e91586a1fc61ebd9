// TransformerConfig: the seed's hyper-parameters plus the explicit choices where the seeds differ.
// Stored as config.json in every checkpoint directory. Every option defaults to seed 000's choice.
#pragma once
#include <cstdint>
#include <string>

namespace qkv::models {

enum class NormPosition { Post, Pre };  // post-LN: norm(x + sublayer(x)) (seed); pre-LN: x + sublayer(norm(x))

struct TransformerConfig {
  int64_t src_vocab_size = 5000;
  int64_t tgt_vocab_size = 5000;
  int64_t d_model = 512;
  int64_t num_heads = 8;
  int64_t num_layers = 6;
  int64_t d_ff = 2048;
  int64_t max_seq_length = 100;
  float dropout = 0.1f;
  int32_t pad_id = 0;
  int32_t bos_id = 2;                 // begin / end of sentence, for decoding (SentencePiece ids
  int32_t eos_id = 3;                 // with pad 0, unk 1, bos 2, eos 3)
  NormPosition norm = NormPosition::Post;
  std::string activation = "relu";    // "relu" (seed) or "gelu"
  float layer_norm_eps = 1e-5f;       // nn.LayerNorm's default, as the seed uses it
  bool scale_embeddings = false;      // multiply embeddings by sqrt(d_model) (the paper) or not (seed)
  bool tie_output_embedding = false;  // fc.weight shares decoder_embedding.weight
  std::string mask_fill = "-1e9";     // value of masked scores: "-1e9" (seed 000) or "-inf"
  float attention_dropout = 0.f;      // dropout on attention weights (the seed has none)

  float mask_fill_value() const;
  // Throws qkv::Error naming the field when a value is out of range or inconsistent.
  void validate() const;
};

// Reads config.json; unknown keys and wrong types are errors naming the file and the key.
TransformerConfig load_config(const std::string& path);
void save_config(const std::string& path, const TransformerConfig& config);  // atomic write
std::string config_to_json(const TransformerConfig& config);
TransformerConfig config_from_json(const std::string& text, const std::string& source_name);

}  // namespace qkv::models
