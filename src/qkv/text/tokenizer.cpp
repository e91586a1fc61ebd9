#include "qkv/text/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/text/byte_level_bpe.h"
#include "qkv/text/tokenizer_json.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/wordpiece.h"

namespace qkv::text {

namespace {
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : spm_(path) {}
  std::vector<int32_t> encode(std::string_view text) const override { return spm_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return spm_.decode(ids); }
  int64_t vocab_size() const override { return spm_.vocab_size(); }
  std::string id_to_token(int32_t id) const override { return spm_.piece(id); }
  // The pieces of the control ids (<pad>, <unk>, <s>, </s> in models trained by qkv).
  int32_t special_token_id(std::string_view token) const override {
    for (const int32_t id : {spm_.pad_id(), spm_.unk_id(), spm_.bos_id(), spm_.eos_id()})
      if (id >= 0 && spm_.piece(id) == token) return id;
    return -1;
  }

 private:
  SentencePiece spm_;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  explicit ByteLevelBpeTokenizer(const std::string& path) : bpe_(ByteLevelBpe::load(path)) {}
  std::vector<int32_t> encode(std::string_view text) const override { return bpe_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bpe_.decode(ids); }
  int64_t vocab_size() const override { return bpe_.vocab_size(); }
  std::string id_to_token(int32_t id) const override { return bpe_.id_to_token(id); }
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    return bpe_.with_special_tokens(std::move(ids));
  }
  int32_t special_token_id(std::string_view token) const override { return bpe_.added_token_id(token); }

 private:
  ByteLevelBpe bpe_;
};

class WordPieceTokenizer final : public Tokenizer {
 public:
  explicit WordPieceTokenizer(const std::string& path) : wp_(WordPiece::load(path)) {}
  std::vector<int32_t> encode(std::string_view text) const override { return wp_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return wp_.decode(ids); }
  int64_t vocab_size() const override { return wp_.vocab_size(); }
  std::string id_to_token(int32_t id) const override { return wp_.id_to_token(id); }
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    return wp_.with_special_tokens(ids);
  }
  int32_t special_token_id(std::string_view token) const override { return wp_.special_id(token); }

 private:
  WordPiece wp_;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// tokenizer.json's model.type; files written by old versions of `tokenizers` have none ("").
std::string model_type(const std::string& path) {
  const nlohmann::json top = read_tokenizer_json(path);
  QKV_CHECK(top.contains("model") && top["model"].is_object(), path << ": model is missing");
  const nlohmann::json& model = top["model"];
  if (!model.contains("type")) return "";
  QKV_CHECK(model["type"].is_string(), path << ": model.type is not a string");
  return model["type"].get<std::string>();
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (!ends_with(path, ".json")) return std::make_unique<SentencePieceTokenizer>(path);
  const std::string type = model_type(path);
  if (type == "BPE" || type.empty()) return std::make_unique<ByteLevelBpeTokenizer>(path);
  if (type == "WordPiece") return std::make_unique<WordPieceTokenizer>(path);
  throw Error(path + ": model.type \"" + type + "\" is not supported (qkv reads byte-level BPE and WordPiece)");
}

}  // namespace qkv::text
