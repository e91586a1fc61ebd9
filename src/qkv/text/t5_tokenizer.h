// The tokenizer of Hugging Face's T5 models (transformers' slow T5Tokenizer, 4.47, legacy=True as
// from_pretrained gives it by default): a SentencePiece model (spiece.model) whose ids are the
// model's ids ("<pad>" 0, "</s>" 1, "<unk>" 2 in T5's), and `extra_ids` sentinels "<extra_id_N>"
// after them, numbered down from the end: "<extra_id_N>" is id spm_size - 1 + extra_ids - N.
//
// Encoding, as T5Tokenizer does it: the special tokens written in the text ("</s>", "<unk>",
// "<pad>", "<extra_id_N>") are cut out as themselves, the sentinels taking the whitespace on both
// sides (lstrip and rstrip), the others none; every remaining span is encoded by SentencePiece on
// its own (so a span after a token starts a word: "Hello <extra_id_0>." gives "▁" "." after the
// sentinel). with_special_tokens appends "</s>" unless the ids already end with it.
// Decoding skips the special tokens (skip_special_tokens=True), drops the "▁" of the first piece,
// joins the pieces with SentencePiece's DecodePieces and strips the ends; tokenizer_config.json's
// clean_up_tokenization_spaces (when true) then removes the space before . , ! ? and English
// contractions as transformers does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/text/added_tokens.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/tokenizer.h"

namespace qkv::text {

// The files of a T5 tokenizer: the SentencePiece model and (optional) transformers' settings.
inline constexpr const char* kT5Spm = "spiece.model";
inline constexpr const char* kT5TokenizerConfig = "tokenizer_config.json";

class T5Tokenizer final : public Tokenizer {
 public:
  // Loads `dir`/spiece.model and, when present, `dir`/tokenizer_config.json: extra_ids (default
  // 100), clean_up_tokenization_spaces (default false), add_prefix_space (default true). Errors name
  // the file: a missing spiece.model, a model without "</s>" "<unk>" "<pad>", a config field of the
  // wrong type, or one asking for what this class does not do (legacy false, other special or
  // added tokens, single_word tokens).
  static std::unique_ptr<T5Tokenizer> load(const std::string& dir);
  // Whether `dir` holds a T5 tokenizer (its spiece.model).
  static bool present(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return int64_t{spm_size_} + extra_ids_; }
  std::string id_to_token(int32_t id) const override;
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override;
  // "</s>", "<unk>", "<pad>" and "<extra_id_N>" for N < extra_ids; -1 for anything else.
  int32_t special_token_id(std::string_view token) const override;
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t extra_ids() const { return extra_ids_; }

 private:
  explicit T5Tokenizer(SentencePiece spm);
  void check_id(int32_t id) const;
  bool is_special(int32_t id) const { return id == eos_ || id == unk_ || id == pad_ || id >= spm_size_; }

  SentencePiece spm_;
  int32_t spm_size_ = 0, extra_ids_ = 0;
  int32_t eos_ = -1, unk_ = -1, pad_ = -1;
  bool clean_up_spaces_ = false, add_prefix_space_ = true;
  std::unordered_map<std::string, int32_t> specials_by_text_;
  AddedTokenMatcher specials_;
};

}  // namespace qkv::text
