#include "qkv/text/tokenizer.h"

#include "qkv/text/byte_level_bpe.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::text {

namespace {
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : spm_(path) {}
  std::vector<int32_t> encode(std::string_view text) const override { return spm_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return spm_.decode(ids); }
  int64_t vocab_size() const override { return spm_.vocab_size(); }

 private:
  SentencePiece spm_;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  explicit ByteLevelBpeTokenizer(const std::string& path) : bpe_(ByteLevelBpe::load(path)) {}
  std::vector<int32_t> encode(std::string_view text) const override { return bpe_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bpe_.decode(ids); }
  int64_t vocab_size() const override { return bpe_.vocab_size(); }

 private:
  ByteLevelBpe bpe_;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (ends_with(path, ".json")) return std::make_unique<ByteLevelBpeTokenizer>(path);
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace qkv::text
