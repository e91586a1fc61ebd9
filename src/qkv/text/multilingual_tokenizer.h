// The tokenizers of fairseq's multilingual translation models as transformers 4.47 has them (the
// slow, SentencePiece-based classes), told apart by tokenizer_config.json's tokenizer_class:
//
//   class             files                                   ids of pieces                 source
//   M2M100Tokenizer   vocab.json, sentencepiece.bpe.model     vocab.json[piece]             __en__ X </s>
//   NllbTokenizer     sentencepiece.bpe.model                 spm id + 1 (fairseq offset)   eng_Latn X </s>
//   MBart50Tokenizer  sentencepiece.bpe.model                 spm id + 1                    en_XX X </s>
//   MBartTokenizer    sentencepiece.bpe.model                 spm id + 1                    X </s> en_XX
//
// With the fairseq offset, <s> <pad> </s> <unk> are ids 0..3 and SentencePiece's own <unk> (id 0)
// is 3. The language codes (and <mask>) are added tokens whose ids tokenizer_config.json's
// added_tokens_decoder gives (transformers >= 4.34 writes it with save_pretrained; without it, as
// older versions saved, the ids are those versions' computation from the codes listed in
// additional_special_tokens: after the pieces, <mask> last); an NLLB tokenizer with
// legacy_behaviour true lays sources out as X </s> eng_Latn, as MBartTokenizer does.
//
// Encoding, as PreTrainedTokenizer.tokenize does: the added tokens written in the text are cut out
// as themselves (with their lstrip / rstrip), every other span is cut into pieces by SentencePiece
// on its own. with_language puts a source language's code and </s> around the ids.
// Decoding skips the special tokens (skip_special_tokens=True: <s> <pad> </s> <unk> <mask> and the
// language codes) and joins the pieces as the class does: M2M100Tokenizer and MBart50Tokenizer with
// SentencePiece's DecodePieces, NllbTokenizer and MBartTokenizer by replacing "▁" with spaces; the
// ends are stripped, and clean_up_tokenization_spaces (when true) is applied as transformers does.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/text/added_tokens.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/tokenizer.h"

namespace qkv::text {

inline constexpr const char* kFairseqSpm = "sentencepiece.bpe.model";
inline constexpr const char* kM2M100Vocab = "vocab.json";
inline constexpr const char* kMultilingualTokenizerConfig = "tokenizer_config.json";

class MultilingualTokenizer final : public Tokenizer {
 public:
  enum class Kind { M2M100, Nllb, MBart50, MBart };

  // Loads `dir`: tokenizer_config.json (tokenizer_class, added_tokens_decoder, src_lang,
  // legacy_behaviour, clean_up_tokenization_spaces), sentencepiece.bpe.model and, for M2M100,
  // vocab.json. Errors name the file and the field: a missing file, another tokenizer_class, no
  // added_tokens_decoder, an added token of the fixed ids elsewhere, an unknown src_lang.
  static std::unique_ptr<MultilingualTokenizer> load(const std::string& dir);
  // Whether `dir` holds such a tokenizer (its sentencepiece.bpe.model).
  static bool present(const std::string& dir);
  // The files load reads from `dir` that exist (for copying them into a checkpoint);
  // special_tokens_map.json only for a tokenizer_config.json without added_tokens_decoder.
  static std::vector<std::string> files(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string id_to_token(int32_t id) const override;
  // The source layout with the default source language (tokenizer_config.json's src_lang, else the
  // class's: en, eng_Latn, en_XX).
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override;
  int32_t special_token_id(std::string_view token) const override;

  Kind kind() const { return kind_; }
  const std::string& default_source_language() const { return src_lang_; }
  // The id of a language code ("fr" or "__fr__" for M2M100, "fra_Latn", "fr_XX"), -1 when the
  // tokenizer has no such language.
  int32_t language_id(std::string_view language) const;
  // `ids` laid out as a source of language `language_id`.
  std::vector<int32_t> with_language(std::vector<int32_t> ids, int32_t language_id) const;
  // Some of the language codes, for messages ("__de__, __en__, __fr__ ...").
  std::string some_languages() const;
  int32_t eos_id() const { return eos_; }

 private:
  MultilingualTokenizer() = default;
  void load_piece_ids(const std::string& dir);
  void add_added_tokens(const std::string& config_path, const nlohmann::json& added);
  // added_tokens_decoder as transformers before 4.34 computed it (the .cpp says how).
  nlohmann::json legacy_added_tokens(const std::string& dir, const nlohmann::json& config) const;
  int32_t piece_to_id(const std::string& piece) const;
  std::string join_pieces(const std::vector<std::string>& pieces) const;
  void check_id(int32_t id) const;

  Kind kind_ = Kind::Nllb;
  std::unique_ptr<SentencePiece> spm_;
  std::unordered_map<std::string, int32_t> vocab_;  // M2M100: vocab.json
  std::vector<std::string> vocab_pieces_;          // M2M100: by id ("" where none)
  std::map<int32_t, std::string> added_;           // added tokens by id
  std::unordered_map<std::string, int32_t> added_ids_;
  std::map<int32_t, bool> added_special_;          // added token id -> special (skipped on decoding)
  std::map<std::string, int32_t> languages_;       // language code -> id
  AddedTokenMatcher matcher_;
  int64_t vocab_size_ = 0;
  int32_t eos_ = 2, unk_ = 3;
  bool language_first_ = true, clean_up_spaces_ = false;
  std::string src_lang_, dir_;
};

}  // namespace qkv::text
