// TransformerConfig: the seed's hyper-parameters plus the explicit choices where the seeds differ.
// Stored as config.json in every checkpoint directory. Every option defaults to seed 000's choice.
#pragma once
#include <cstdint>
#include <string>

namespace qkv::models {

// Bounds of the size fields: far above any model that fits in memory, low enough that an impossible
// size is refused naming its field instead of failing in the allocator.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;     // src_vocab_size, tgt_vocab_size
inline constexpr int64_t kMaxWidth = 65536;                    // d_model, d_ff
inline constexpr int64_t kMaxLayers = 1024;                    // num_layers
inline constexpr int64_t kMaxSeqLength = int64_t{1} << 20;     // max_seq_length
inline constexpr int64_t kMaxModelFloats = int64_t{1} << 34;   // parameters + positional table (64 GiB)

// config.json's "format_version": raised when a change needs readers to know about it. A file of
// a newer version is refused with a message to upgrade rather than misread.
inline constexpr int kConfigFormatVersion = 1;

// config.json's "architecture", as Hugging Face's configs name one. The families of seed 003:
// encoder-decoder (the seed's model; the default, so configs written before the field existed read
// unchanged), decoder-only (GPT) and encoder-only (BERT, not built yet).
inline constexpr const char* kEncoderDecoder = "encoder-decoder";
inline constexpr const char* kDecoderOnly = "decoder-only";

enum class NormPosition { Post, Pre };  // post-LN: norm(x + sublayer(x)) (seed); pre-LN: x + sublayer(norm(x))

// One config for every family. A decoder-only model has one vocabulary, written "vocab_size" in
// config.json and held in tgt_vocab_size (src_vocab_size mirrors it and is never read); it is always
// pre-LN; pad_id may be -1 (no padding id, as GPT-2). Fields of one family only are refused by name
// in the other (config.json: src_vocab_size/tgt_vocab_size/norm in a decoder-only model;
// vocab_size/positions in an encoder-decoder one).
struct TransformerConfig {
  std::string architecture = kEncoderDecoder;
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
  std::string activation = "relu";    // "relu" (seed), "gelu" (erf) or "gelu_tanh" (GPT-2's approximation)
  float layer_norm_eps = 1e-5f;       // nn.LayerNorm's default, as the seed uses it
  std::string layer_norm = "standard";  // "standard" (nn.LayerNorm) or "seed003": (x - mean) / (unbiased std + eps)
  float ffn_dropout = 0.f;            // dropout after the FFN's activation (seed 000: none; seed 003: 0.1)
  bool scale_embeddings = false;      // multiply embeddings by sqrt(d_model) (the paper) or not (seed)
  bool tie_output_embedding = false;  // fc.weight shares decoder_embedding.weight
  std::string mask_fill = "-1e9";     // value of masked scores: "-1e9" (seed 000) or "-inf"
  float attention_dropout = 0.f;      // dropout on attention weights (the seed has none)
  std::string positions = "sinusoidal";  // "sinusoidal" (the seed) or "learned" (GPT-2; decoder-only)

  bool decoder_only() const { return architecture == kDecoderOnly; }

  float mask_fill_value() const;
  // Throws qkv::Error naming the field when a value is out of range or inconsistent: sizes in
  // [1, kMax...], num_heads <= d_model and dividing it, ids inside the vocabularies, float fields
  // finite and in range, and at most kMaxModelFloats floats in all (naming the largest part).
  void validate() const;
};

// Reads config.json. Errors name the file and the field: unknown keys, a key given twice, wrong
// types, and every check of validate(). Integer fields take JSON integers; a number with a fraction
// (32.5) is refused, one written as a float with an integral value (32.0, 1e3) is read as that
// integer. Out-of-range numbers are reported as written (9223372036854775808, not a wrapped value).
TransformerConfig load_config(const std::string& path);
// A decoder-only config with GPT-2's choices where the seed has none: pre-LN, GELU (tanh), learned
// positions, output tied to the token embedding, no padding id; sizes are seed 000's.
TransformerConfig decoder_only_defaults();
void save_config(const std::string& path, const TransformerConfig& config);  // atomic write
std::string config_to_json(const TransformerConfig& config);
TransformerConfig config_from_json(const std::string& text, const std::string& source_name);

}  // namespace qkv::models
