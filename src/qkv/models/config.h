// TransformerConfig: the seed's hyper-parameters plus the explicit choices where the seeds differ.
// Stored as config.json in every checkpoint directory. Every option defaults to seed 000's choice.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::models {

// Bounds of the size fields: far above any model that fits in memory, low enough that an impossible
// size is refused naming its field instead of failing in the allocator.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;     // src_vocab_size, tgt_vocab_size
inline constexpr int64_t kMaxWidth = 65536;                    // d_model, d_ff
inline constexpr int64_t kMaxLayers = 1024;                    // num_layers
inline constexpr int64_t kMaxSeqLength = int64_t{1} << 20;     // max_seq_length
inline constexpr int64_t kMaxTypeVocabSize = 1024;            // type_vocab_size (BERT: 2)
inline constexpr int64_t kMaxLabels = 100000;                  // labels of a classification head
inline constexpr int64_t kMaxModelFloats = int64_t{1} << 34;   // parameters + positional table (64 GiB)

// config.json's "format_version": raised when a change needs readers to know about it. A file of
// a newer version is refused with a message to upgrade rather than misread.
inline constexpr int kConfigFormatVersion = 1;

// config.json's "architecture", as Hugging Face's configs name one. The families of seed 003:
// encoder-decoder (the seed's model; the default, so configs written before the field existed read
// unchanged), decoder-only (GPT) and encoder-only (BERT).
inline constexpr const char* kEncoderDecoder = "encoder-decoder";
inline constexpr const char* kDecoderOnly = "decoder-only";
inline constexpr const char* kEncoderOnly = "encoder-only";

enum class NormPosition { Post, Pre };  // post-LN: norm(x + sublayer(x)) (seed); pre-LN: x + sublayer(norm(x))

// One config for every family. Decoder-only and encoder-only models have one vocabulary, written
// "vocab_size" in config.json and held in tgt_vocab_size (src_vocab_size mirrors it and is never
// read). A decoder-only model is always pre-LN and its pad_id may be -1 (no padding id, as GPT-2).
// An encoder-only model (BERT) is post-LN, names its special tokens cls_id / sep_id / mask_id
// instead of bos_id / eos_id, and adds token types, the pooler and its heads. Fields of one family
// only are refused by name in the others (see family_fields in config.cpp).
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
  std::string activation = "relu";    // "relu" (seed), "gelu" (erf), "gelu_tanh" (GPT-2's approximation) or
                                      // "silu" (Marian's swish)
  float layer_norm_eps = 1e-5f;       // nn.LayerNorm's default, as the seed uses it
  // "standard" (nn.LayerNorm), "seed003": (x - mean) / (unbiased std + eps), or, for encoder-decoder
  // models, "rms": T5's x / sqrt(mean(x^2) + eps) * weight (no mean, no bias).
  std::string layer_norm = "standard";
  float ffn_dropout = 0.f;            // dropout after the FFN's activation (seed 000: none; seed 003: 0.1)
  bool scale_embeddings = false;      // multiply embeddings by sqrt(d_model) (the paper) or not (seed)
  bool tie_output_embedding = false;  // fc.weight shares decoder_embedding.weight
  // Encoder-decoder only: encoder_embedding.weight shares decoder_embedding.weight, for a joint
  // vocabulary (src_vocab_size == tgt_vocab_size), as fairseq's --share-all-embeddings with
  // tie_output_embedding and Marian's --tied-embeddings-all.
  bool share_embeddings = false;
  std::string mask_fill = "-1e9";     // value of masked scores: "-1e9" (seed 000) or "-inf"
  float attention_dropout = 0.f;      // dropout on attention weights (the seed has none)
  // "sinusoidal" (the seed: sin and cos interleaved), "learned" (GPT-2, BERT; in an encoder-decoder
  // model, BART: a table of max_seq_length rows for each stack) or, for encoder-decoder models,
  // "sinusoidal_halves" (Hugging Face's Marian: the sines in the first half of the width, the
  // cosines in the second, computed in double precision as its numpy code does) or
  // "sinusoidal_fairseq" (Hugging Face's M2M100 / NLLB: tensor2tensor's frequencies, sines then
  // cosines, and qkv's position p read at fairseq's row p + pad_id + 1, as fairseq counts positions
  // from padding_idx + 1).
  std::string positions = "sinusoidal";
  // Encoder-decoder only: the seed's generate_mask also hides the target's padding *query rows*.
  // With right-padded targets that changes nothing but the padding rows' own outputs, yet a model
  // whose decoder starts from the pad id (Marian: decoder_start_token_id = pad_token_id) would lose
  // its first position: Hugging Face's decoders mask future keys only, and imports set this false.
  bool target_query_mask = true;

  // Encoder-decoder only: T5's choices (each the seed's by default).
  // With positions "relative", no table is added to the embeddings: each stack's self-attention
  // adds a learned bias per head and bucket of the key's offset from the query (bidirectional
  // buckets in the encoder, causal ones in the decoder; cross-attention has none), as T5 does.
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  bool scale_attention_scores = true;  // q.k / sqrt(dk) (seed); T5 leaves scores unscaled
  bool linear_bias = true;             // biases in the attention, feed-forward and output layers (T5: none)
  // fc2(activation(fc1(x)) * fc_up(x)): T5 v1.1's "gated-gelu" (with activation "gelu_tanh").
  bool gated_feed_forward = false;
  // The decoder's output times d_model^-0.5 before the output layer: T5 with a tied output layer.
  bool scale_decoder_output = false;
  // The width of one attention head (T5's d_kv); 0: d_model / num_heads (the seed). Otherwise the
  // attention projects d_model to num_heads x head_dim and back (flan-t5-small: 6 heads of 64 in a
  // width of 512).
  int64_t head_dim = 0;

  // Encoder-decoder only: BART's choices (each off by default).
  // A LayerNorm of each stack's embeddings (token table + positions) before the first layer:
  // BART's and mBART's layernorm_embedding (BERT's encoder-only model always has one).
  bool embedding_norm = false;
  // The first target token search produces, whatever the scores say (mBART-50's target language
  // code; transformers' forced_bos_token_id): its log-probability counts as 0, as transformers'
  // ForcedBOSTokenLogitsProcessor makes it. -1: none.
  int32_t forced_bos_id = -1;

  // Encoder-only (BERT) fields.
  int64_t type_vocab_size = 2;        // token-type (segment) embeddings; 0: none
  bool pooler = true;                 // pooled = tanh(dense(hidden of the first token))
  bool mlm_head = true;               // masked-LM head: LayerNorm(gelu(dense(h))) @ token_embedding^T + bias
  std::vector<std::string> labels;    // classification head over these labels (none when empty)
  int32_t cls_id = 2, sep_id = 3;     // [CLS] starts every sequence, [SEP] ends it
  int32_t mask_id = -1;               // [MASK] of masked-LM training; -1: none

  bool decoder_only() const { return architecture == kDecoderOnly; }
  bool encoder_only() const { return architecture == kEncoderOnly; }
  bool encoder_decoder() const { return architecture == kEncoderDecoder; }
  // One vocabulary (vocab_size) rather than a source and a target one.
  bool single_vocabulary() const { return decoder_only() || encoder_only(); }
  // One head's width, and the width of all heads together (what W_q, W_k, W_v produce).
  int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / num_heads; }
  int64_t attention_width() const { return head_size() * num_heads; }

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
// An encoder-only config with BERT's choices: post-LN, exact GELU, learned positions (512), two
// token types, LayerNorm eps 1e-12, attention dropout 0.1, pooler and masked-LM head with the output
// tied to the token embedding; sizes are seed 000's.
TransformerConfig encoder_only_defaults();
void save_config(const std::string& path, const TransformerConfig& config);  // atomic write
std::string config_to_json(const TransformerConfig& config);
TransformerConfig config_from_json(const std::string& text, const std::string& source_name);

}  // namespace qkv::models
