// Reading tokenizer.json for ByteLevelBpe: what is supported, what is refused, and the checks that
// turn a damaged file into a qkv::Error naming the file and the field.
#include <unicode/utf8.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/text/tokenizer_json.h"
#include "qkv/text/byte_level_alphabet.h"
#include "qkv/text/byte_level_bpe.h"

namespace qkv::text {

using nlohmann::json;

class ByteLevelBpeLoader {
 public:
  explicit ByteLevelBpeLoader(const std::string& path) : path_(path) {}

  ByteLevelBpe load() {
    const json top = read_tokenizer_json(path_);
    check_components(top);
    const json& model = field(top, "model", "model");
    check_model_options(model);
    read_pre_tokenizer(field(top, "pre_tokenizer", "pre_tokenizer"));
    read_vocab(field(model, "vocab", "model.vocab"), top.contains("added_tokens") ? top["added_tokens"] : json::array());
    if (!model.contains("merges")) fail("model.merges is missing");
    read_merges(model["vocab"], model["merges"]);
    bpe_.ignore_merges_ = optional_bool(model, "ignore_merges", "model.ignore_merges").value_or(false);
    if (has_type(top, "post_processor", "RobertaProcessing")) read_roberta_processing(top["post_processor"]);
    return std::move(bpe_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { throw Error(path_ + ": " + msg); }


  const json& field(const json& obj, const char* key, const std::string& name) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(name + " is missing");
    if (!it->is_object()) fail(name + " is not a JSON object");
    return *it;
  }

  // The "type" of a component, for messages: "WordPiece", or the JSON itself when it has none.
  static std::string describe(const json& j) {
    if (j.is_object() && j.contains("type") && j["type"].is_string()) return '"' + j["type"].get<std::string>() + '"';
    std::string s = j.dump();
    return s.size() > 60 ? s.substr(0, 60) + "..." : s;
  }

  static bool is_null_or_absent(const json& obj, const char* key) { return !obj.contains(key) || obj[key].is_null(); }

  static bool has_type(const json& obj, const char* key, const char* type) {
    return obj.contains(key) && obj[key].is_object() && obj[key].contains("type") && obj[key]["type"] == type;
  }

  std::optional<bool> optional_bool(const json& obj, const char* key, const std::string& name) const {
    if (is_null_or_absent(obj, key)) return std::nullopt;
    if (!obj[key].is_boolean()) fail(name + " is not true or false");
    return obj[key].get<bool>();
  }

  void check_components(const json& top) const {
    if (!is_null_or_absent(top, "normalizer"))
      fail("normalizer " + describe(top["normalizer"]) + " is not supported (byte-level BPE reads none: \"normalizer\": null)");
    if (!has_type(top, "pre_tokenizer", "ByteLevel"))
      fail("pre_tokenizer " + describe(top.value("pre_tokenizer", json())) + " is not supported (byte-level BPE needs \"ByteLevel\")");
    if (!has_type(top, "decoder", "ByteLevel"))
      fail("decoder " + describe(top.value("decoder", json())) + " is not supported (byte-level BPE needs \"ByteLevel\")");
    // A ByteLevel post-processor only adjusts offsets; RobertaProcessing (BART) adds cls and sep
    // (read_roberta_processing); others (TemplateProcessing...) add tokens qkv does not.
    if (!is_null_or_absent(top, "post_processor") && !has_type(top, "post_processor", "ByteLevel") &&
        !has_type(top, "post_processor", "RobertaProcessing"))
      fail("post_processor " + describe(top["post_processor"]) +
           " is not supported (null, \"ByteLevel\" or \"RobertaProcessing\" only)");
    for (const char* key : {"truncation", "padding"})
      if (!is_null_or_absent(top, key)) fail(std::string(key) + " is not supported (it must be null)");
  }

  void check_model_options(const json& model) const {
    // Files written by old versions of `tokenizers` have no model.type.
    if (model.contains("type") && model["type"] != "BPE")
      fail("model.type " + model["type"].dump() + " is not supported (byte-level BPE only)");
    if (!is_null_or_absent(model, "dropout")) fail("model.dropout is not supported (BPE dropout; it must be null)");
    if (!is_null_or_absent(model, "unk_token")) fail("model.unk_token is not supported (byte-level BPE has none; it must be null)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (!is_null_or_absent(model, key) && model[key] != "")
        fail("model." + std::string(key) + " is not supported (it must be null)");
    if (optional_bool(model, "byte_fallback", "model.byte_fallback").value_or(false))
      fail("model.byte_fallback true is not supported (byte-level BPE needs no byte fallback)");
  }

  // RobertaProcessing's "cls" and "sep": [token, id], the id the vocabulary gives the token.
  void read_roberta_processing(const json& p) {
    for (const char* key : {"cls", "sep"}) {
      const std::string name = std::string("post_processor.") + key;
      if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2 || !p[key][0].is_string())
        fail(name + " is not a [token, id] pair");
      const int32_t id = read_id(p[key][1], name + "[1]");
      if (bpe_.token_to_id(p[key][0].get<std::string>()) != id)
        fail(name + ": \"" + p[key][0].get<std::string>() + "\" does not have id " + std::to_string(id));
      (std::string(key) == "cls" ? bpe_.cls_id_ : bpe_.sep_id_) = id;
    }
  }

  void read_pre_tokenizer(const json& pre) {
    const auto prefix = optional_bool(pre, "add_prefix_space", "pre_tokenizer.add_prefix_space");
    if (!prefix) fail("pre_tokenizer.add_prefix_space is missing");
    bpe_.add_prefix_space_ = *prefix;
    bpe_.use_regex_ = optional_bool(pre, "use_regex", "pre_tokenizer.use_regex").value_or(true);
  }

  int32_t read_id(const json& v, const std::string& name) const {
    if (!v.is_number_integer()) fail(name + " is not an integer id");
    const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                           ? -1
                           : v.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) fail(name + " " + v.dump() + " is out of range");
    return static_cast<int32_t>(id);
  }

  // Puts `token` at `id`: ids must be 0..N-1 (N: the model vocabulary and the added tokens not in
  // it), each given once.
  void place(int32_t id, const std::string& token, const std::string& where) {
    const size_t n = bpe_.tokens_.size();
    if (static_cast<size_t>(id) >= n)
      fail(where + ": \"" + token + "\" has id " + std::to_string(id) + ", out of range (the file has " +
           std::to_string(n) + " tokens, so ids 0.." + std::to_string(n - 1) + ")");
    if (filled_[id])
      fail(where + ": id " + std::to_string(id) + " is given to both \"" + bpe_.tokens_[id] + "\" and \"" + token + "\"");
    filled_[id] = true;
    bpe_.tokens_[id] = token;
    bpe_.ids_.emplace(token, id);
  }

  void read_vocab(const json& vocab, const json& added) {
    if (!added.is_array()) fail("added_tokens is not a JSON array");
    struct Added {
      std::string content;
      int32_t id;
      bool normalized, lstrip, rstrip;
    };
    std::vector<Added> added_tokens;
    size_t new_tokens = 0;  // added tokens that are not in the model vocabulary
    for (size_t i = 0; i < added.size(); ++i) {
      const json& t = added[i];
      const std::string name = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id"))
        fail(name + " is not an object with \"id\" and \"content\"");
      const std::string content = t["content"].get<std::string>();
      if (content.empty()) fail(name + ".content is empty");
      if (optional_bool(t, "single_word", name + ".single_word").value_or(false))
        fail(name + " (\"" + content + "\"): single_word true is not supported");
      const bool lstrip = optional_bool(t, "lstrip", name + ".lstrip").value_or(false);
      const bool rstrip = optional_bool(t, "rstrip", name + ".rstrip").value_or(false);
      const bool special = optional_bool(t, "special", name + ".special").value_or(false);
      // `tokenizers` makes special tokens unnormalized unless told otherwise.
      const bool normalized = optional_bool(t, "normalized", name + ".normalized").value_or(!special);
      const int32_t id = read_id(t["id"], name + ".id");
      if (const auto it = vocab.find(content); it != vocab.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() != id)
          fail(name + ": \"" + content + "\" has id " + std::to_string(id) + " but model.vocab gives it " + it->dump());
      } else {
        ++new_tokens;
      }
      for (const Added& a : added_tokens)
        if (a.content == content) fail(name + ": \"" + content + "\" is an added token twice");
      added_tokens.push_back({content, id, normalized, lstrip, rstrip});
    }

    bpe_.tokens_.assign(vocab.size() + new_tokens, std::string());
    filled_.assign(bpe_.tokens_.size(), false);
    for (const auto& [token, v] : vocab.items()) place(read_id(v, "model.vocab[\"" + token + "\"]"), token, "model.vocab");
    for (const Added& a : added_tokens) {
      if (!vocab.contains(a.content)) place(a.id, a.content, "added_tokens");
      (a.normalized ? bpe_.added_normalized_ : bpe_.added_raw_).push_back({a.content, a.id, a.lstrip, a.rstrip});
    }

    // Single bytes come from the model vocabulary (not from the added tokens), as in `tokenizers`.
    const auto& symbols = byte_level_symbols();
    for (int b = 0; b < 256; ++b)
      if (const auto it = vocab.find(symbols[b]); it != vocab.end()) bpe_.byte_ids_[b] = it->get<int32_t>();
    bpe_.token_bytes_.resize(bpe_.tokens_.size());
    for (size_t id = 0; id < bpe_.tokens_.size(); ++id) bpe_.token_bytes_[id] = token_bytes(bpe_.tokens_[id]);
  }

  // What the ByteLevel decoder makes of a token: the bytes its characters stand for, or, when a
  // character is not in the byte alphabet (an added token like "<my token>"), the token as is.
  static std::string token_bytes(const std::string& token) {
    std::string bytes;
    const auto* s = reinterpret_cast<const uint8_t*>(token.data());
    const int32_t n = static_cast<int32_t>(token.size());
    int32_t i = 0;
    while (i < n) {
      UChar32 c;
      U8_NEXT(s, i, n, c);
      const int b = c < 0 ? -1 : byte_level_byte(static_cast<uint32_t>(c));
      if (b < 0) return token;
      bytes += static_cast<char>(b);
    }
    return bytes;
  }

  int32_t model_id(const json& vocab, const std::string& token, const std::string& where) const {
    const auto it = vocab.find(token);
    if (it == vocab.end()) fail(where + ": \"" + token + "\" is not in model.vocab");
    return it->get<int32_t>();  // checked by read_vocab
  }

  // merges[i] joins two model tokens into a third, all in model.vocab; rank i (lower merges first).
  void read_merges(const json& vocab, const json& merges) {
    if (!merges.is_array()) fail("model.merges is not a JSON array");
    if (merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) fail("model.merges is too long");
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      const std::string where = "model.merges[" + std::to_string(i) + "]";
      std::string left, right;
      if (m.is_string()) {  // "a b", the form of older files
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail(where + " " + m.dump() + " is not two tokens separated by one space");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail(where + " " + m.dump().substr(0, 60) + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const int32_t a = model_id(vocab, left, where);
      const int32_t b = model_id(vocab, right, where);
      const int32_t joined = model_id(vocab, left + right, where + " (the merge of \"" + left + "\" and \"" + right + "\")");
      // A pair listed twice keeps its last rank, as the hash map `tokenizers` builds does.
      bpe_.merges_.insert_or_assign(static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b),
                                    ByteLevelBpe::Merge{static_cast<int32_t>(i), joined});
    }
  }

  std::string path_;
  ByteLevelBpe bpe_;
  std::vector<bool> filled_;
};

ByteLevelBpe ByteLevelBpe::load(const std::string& tokenizer_json_path) {
  return ByteLevelBpeLoader(tokenizer_json_path).load();
}

}  // namespace qkv::text
