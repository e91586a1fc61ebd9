// BERT's WordPiece tokenizer, read from a Hugging Face tokenizer.json and encoding exactly as the
// `tokenizers` package does (tests/python/make_wordpiece_refs.py makes the reference data).
//
// What is read: model "WordPiece" (vocab, unk_token, continuing_subword_prefix,
// max_input_chars_per_word), normalizer "BertNormalizer" or null, pre_tokenizer "BertPreTokenizer"
// or null, post_processor "TemplateProcessing", "BertProcessing" or null, decoder "WordPiece" or
// null, and added_tokens with all their options (special, normalized, lstrip, rstrip,
// single_word). Any other component type is refused by name. truncation and padding are settings
// of a use, not of the vocabulary: they are ignored (qkv never truncates or pads here). Ids must be
// 0..N-1, each given once, and unk_token must be in the vocabulary.
//
// Encoding, as `tokenizers` does it:
//   1. added tokens with normalized false are cut out of the raw text (added_tokens.h);
//   2. each remaining piece is normalized (bert_normalizer.h), and added tokens with normalized
//      true are cut out of the result (matched in their normalized form);
//   3. the rest is split into words (bert_pretokenizer.h);
//   4. each word becomes the longest vocabulary token that starts it, then the longest
//      continuing_subword_prefix + token that starts the rest, and so on; a word of more than
//      max_input_chars_per_word characters, or one that cannot be split so, is unk_token.
// encode() gives the ids without special tokens; with_special_tokens() adds what the
// post-processor's single-sequence template says ([CLS] ids [SEP] for BERT).
//
// encode() and decode() are thread-safe (no state changes after load).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/text/added_tokens.h"
#include "qkv/text/bert_normalizer.h"

namespace qkv::text {

class WordPiece {
 public:
  // Throws qkv::Error naming the path and the field for an unreadable, damaged or unsupported file.
  static WordPiece load(const std::string& tokenizer_json_path);

  std::vector<int32_t> encode(std::string_view text) const;
  // `ids` inside the post-processor's single-sequence template ([CLS] $A [SEP]); unchanged when
  // the file has no post-processor.
  std::vector<int32_t> with_special_tokens(const std::vector<int32_t>& ids) const;
  // As `tokenizers`' decode(ids, skip_special_tokens): the WordPiece decoder joins continuing
  // pieces to the word before and puts a space before the others, then its cleanup (" ." -> ".",
  // " n't" -> "n't"...) if configured. Throws qkv::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  // Model vocabulary and added tokens together.
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of a token as written in tokenizer.json ("hello", "##ing", "[MASK]"), or -1.
  int32_t token_to_id(std::string_view token) const;
  // Throws qkv::Error for an id out of range.
  const std::string& id_to_token(int32_t id) const;
  // The id of a special added token ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"), or -1 when
  // the file has no such special token.
  int32_t special_id(std::string_view token) const;
  int32_t unk_id() const { return unk_id_; }
  bool is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }
  const std::optional<BertNormalizerOptions>& normalizer() const { return normalizer_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  // One element of the post-processor's template: the sequence itself, or special token ids.
  struct TemplatePiece {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };

  WordPiece() = default;
  friend class WordPieceLoader;

  void encode_normalized(std::string_view normalized, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::string& key, std::vector<int32_t>& out) const;
  int32_t find_piece(std::string_view word, size_t start, size_t& end, std::string& key) const;

  std::vector<std::string> tokens_;  // id -> token as written in the file
  std::vector<bool> special_;        // id -> a special added token (skipped by decode)
  TokenMap vocab_;                   // model.vocab: what words are split into
  TokenMap added_;                   // added tokens not in model.vocab, for token_to_id
  TokenMap specials_;                // special added tokens
  int32_t unk_id_ = -1;
  std::string prefix_ = "##";        // continuing_subword_prefix
  size_t max_input_chars_ = 100;
  size_t max_token_bytes_ = 0;       // the longest vocabulary token: no longer piece can match
  std::optional<BertNormalizerOptions> normalizer_;
  bool bert_pretokenizer_ = false;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::vector<TemplatePiece> template_;  // empty: no post-processor
  bool wordpiece_decoder_ = false;       // false: tokens joined by spaces, as with no decoder
  std::string decoder_prefix_ = "##";
  bool decoder_cleanup_ = true;
};

}  // namespace qkv::text
