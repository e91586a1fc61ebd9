// What commands need from a tokenizer, whichever kind a checkpoint carries: SentencePiece
// (spm.model, trained by qkv) or GPT-2's byte-level BPE (tokenizer.json, from Hugging Face).
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
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
};

// A tokenizer.json (byte-level BPE) or a SentencePiece model, by the file's name; errors name it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace qkv::text
