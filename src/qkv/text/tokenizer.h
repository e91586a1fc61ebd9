// What commands need from a tokenizer, whichever kind a checkpoint carries: SentencePiece
// (spm.model, trained by qkv), GPT-2's byte-level BPE or BERT's WordPiece (tokenizer.json, from
// Hugging Face).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text`, without special tokens.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // WordPiece skips special tokens ([CLS], [SEP], [PAD]...), as `tokenizers`' decode does by default.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The token an id stands for, as the tokenizer writes it ("▁the", "Ġthe", "##ing", "[CLS]").
  virtual std::string id_to_token(int32_t id) const = 0;
  // `ids` with the special tokens the tokenizer's post-processor adds to one sequence (WordPiece:
  // [CLS] ids [SEP]); unchanged for SentencePiece and byte-level BPE, which add none.
  virtual std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const { return ids; }
  // The id of a special token ("[MASK]", "[PAD]", "<|endoftext|>"), or -1 when there is none.
  virtual int32_t special_token_id(std::string_view token) const = 0;
};

// tokenizer.json (its model.type: "BPE" is byte-level BPE, "WordPiece" is WordPiece; any other type
// is refused by name) or, for any other file name, a SentencePiece model. Errors name the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace qkv::text
