// The tokenizer of Hugging Face's Marian models (OPUS-MT; transformers' MarianTokenizer): a
// SentencePiece model cuts text into pieces, and the model's ids are the pieces' entries in a
// vocabulary file (vocab.json), not the SentencePiece ids. One object is one side: the source
// (source.spm with vocab.json) or the target (target.spm with vocab.json, or target_vocab.json when
// tokenizer_config.json says separate_vocabs).
//
// Encoding, as MarianTokenizer does it: the special tokens ("</s>", "<unk>", "<pad>") written in the
// text are cut out as themselves; in each remaining span a language code at its start (">>fra<<",
// the regular expression >>.+<< matched greedily) is kept as one token and every code in the span
// is removed; the rest is cut into pieces, each looked up in the vocabulary (a piece it lacks is
// "<unk>"). with_special_tokens appends "</s>". Text is not punctuation-normalised: MarianTokenizer
// does that only for its `normalize` helper, which tokenising never calls.
// Decoding skips the special tokens (skip_special_tokens=True) and joins the pieces with
// SentencePiece's DecodePieces, "▁" read as a space and the ends stripped; tokenizer_config.json's
// clean_up_tokenization_spaces (when true) then removes the space before . , ! ? and English
// contractions as transformers does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkv/text/added_tokens.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/tokenizer.h"

namespace qkv::text {

// The files of a Marian tokenizer, in a Hugging Face directory and in a qkv checkpoint alike.
inline constexpr const char* kMarianSourceSpm = "source.spm";
inline constexpr const char* kMarianTargetSpm = "target.spm";
inline constexpr const char* kMarianVocab = "vocab.json";
inline constexpr const char* kMarianTargetVocab = "target_vocab.json";  // separate_vocabs only
inline constexpr const char* kTokenizerConfig = "tokenizer_config.json";

class MarianTokenizer final : public Tokenizer {
 public:
  // Loads one side from `dir`; errors name the file (a missing one, a vocabulary that is not an
  // object of piece -> id, ids repeated or negative, no "<unk>", "</s>" or "<pad>").
  static std::unique_ptr<MarianTokenizer> load(const std::string& dir, bool target);
  // Whether `dir` holds a Marian tokenizer (its vocab.json and source.spm).
  static bool present(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string id_to_token(int32_t id) const override;
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override;
  int32_t special_token_id(std::string_view token) const override;
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }

 private:
  MarianTokenizer(SentencePiece spm, std::string vocab_path);
  void encode_span(std::string_view span, std::vector<int32_t>& out) const;
  int32_t lookup(const std::string& piece) const;

  SentencePiece spm_;
  std::string vocab_path_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> pieces_;  // by id; "" where the vocabulary has no such id
  int64_t vocab_size_ = 0;
  int32_t eos_ = -1, unk_ = -1, pad_ = -1;
  bool clean_up_spaces_ = false;
  AddedTokenMatcher specials_;
};

}  // namespace qkv::text
