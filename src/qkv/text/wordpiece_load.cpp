// Reading tokenizer.json for WordPiece: what is supported, what is refused, and the checks that turn
// a damaged file into a qkv::Error naming the file and the field.
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/text/tokenizer_json.h"
#include "qkv/text/wordpiece.h"

namespace qkv::text {

using nlohmann::json;

class WordPieceLoader {
 public:
  explicit WordPieceLoader(const std::string& path) : path_(path) {}

  WordPiece load() {
    const json top = read_tokenizer_json(path_);
    read_model(field(top, "model", "model"));
    read_added_tokens(top.contains("added_tokens") ? top["added_tokens"] : json::array());
    place_tokens();
    read_normalizer(top.value("normalizer", json()));
    read_pre_tokenizer(top.value("pre_tokenizer", json()));
    read_post_processor(top.value("post_processor", json()));
    read_decoder(top.value("decoder", json()));
    add_patterns();
    return std::move(wp_);
  }

 private:
  struct Added {
    std::string content;
    int32_t id;
    bool special, normalized, single_word, lstrip, rstrip;
  };

  [[noreturn]] void fail(const std::string& msg) const { throw Error(path_ + ": " + msg); }


  const json& field(const json& obj, const char* key, const std::string& name) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(name + " is missing");
    return *it;
  }

  std::string string_field(const json& obj, const char* key, const std::string& name) const {
    const json& v = field(obj, key, name);
    if (!v.is_string()) fail(name + " is not a string");
    return v.get<std::string>();
  }

  std::optional<bool> optional_bool(const json& obj, const char* key, const std::string& name) const {
    if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
    if (!obj[key].is_boolean()) fail(name + " is not true or false");
    return obj[key].get<bool>();
  }

  int32_t read_id(const json& v, const std::string& name) const {
    if (!v.is_number_integer()) fail(name + " is not an integer id");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                               : v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail(name + " " + v.dump() + " is out of range");
    return static_cast<int32_t>(v.get<int64_t>());
  }

  // The "type" of a component, for messages: "Sequence", or the JSON itself when it has none.
  static std::string describe(const json& j) {
    if (j.is_object() && j.contains("type") && j["type"].is_string()) return '"' + j["type"].get<std::string>() + '"';
    std::string s = j.dump();
    return s.size() > 60 ? s.substr(0, 60) + "..." : s;
  }

  static bool has_type(const json& j, const char* type) {
    return j.is_object() && j.contains("type") && j["type"] == type;
  }

  void read_model(const json& model) {
    if (!model.is_object()) fail("model is not a JSON object");
    if (model.contains("type") && model["type"] != "WordPiece")
      fail("model.type " + model["type"].dump() + " is not supported (this reader is WordPiece's)");
    vocab_ = &field(model, "vocab", "model.vocab");
    if (!vocab_->is_object()) fail("model.vocab is not a JSON object of token: id");
    unk_token_ = string_field(model, "unk_token", "model.unk_token");
    wp_.prefix_ = string_field(model, "continuing_subword_prefix", "model.continuing_subword_prefix");
    const json& max_chars = field(model, "max_input_chars_per_word", "model.max_input_chars_per_word");
    if (!max_chars.is_number_integer() || (!max_chars.is_number_unsigned() && max_chars.get<int64_t>() < 0))
      fail("model.max_input_chars_per_word is not a non-negative integer");
    wp_.max_input_chars_ = max_chars.get<size_t>();
  }

  void read_added_tokens(const json& added) {
    if (!added.is_array()) fail("added_tokens is not a JSON array");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& t = added[i];
      const std::string name = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id"))
        fail(name + " is not an object with \"id\" and \"content\"");
      Added a{t["content"].get<std::string>(), read_id(t["id"], name + ".id"), false, false, false, false, false};
      if (a.content.empty()) fail(name + ".content is empty");
      a.special = optional_bool(t, "special", name + ".special").value_or(false);
      // `tokenizers` makes special tokens unnormalized unless told otherwise.
      a.normalized = optional_bool(t, "normalized", name + ".normalized").value_or(!a.special);
      a.single_word = optional_bool(t, "single_word", name + ".single_word").value_or(false);
      a.lstrip = optional_bool(t, "lstrip", name + ".lstrip").value_or(false);
      a.rstrip = optional_bool(t, "rstrip", name + ".rstrip").value_or(false);
      if (const auto it = vocab_->find(a.content); it != vocab_->end() && (!it->is_number_integer() || *it != a.id))
        fail(name + ": \"" + a.content + "\" has id " + std::to_string(a.id) + " but model.vocab gives it " + it->dump());
      for (const Added& b : added_)
        if (b.content == a.content) fail(name + ": \"" + a.content + "\" is an added token twice");
      added_.push_back(std::move(a));
    }
  }

  // Puts `token` at `id`: ids must be 0..N-1 (N: model.vocab and the added tokens not in it), each once.
  void place(int32_t id, const std::string& token, const std::string& where) {
    const size_t n = wp_.tokens_.size();
    if (static_cast<size_t>(id) >= n)
      fail(where + ": \"" + token + "\" has id " + std::to_string(id) + ", out of range (the file has " +
           std::to_string(n) + " tokens, so ids 0.." + std::to_string(n - 1) + ")");
    if (filled_[id])
      fail(where + ": id " + std::to_string(id) + " is given to both \"" + wp_.tokens_[id] + "\" and \"" + token + "\"");
    filled_[id] = true;
    wp_.tokens_[id] = token;
  }

  void place_tokens() {
    size_t new_tokens = 0;
    for (const Added& a : added_) new_tokens += vocab_->contains(a.content) ? 0 : 1;
    wp_.tokens_.assign(vocab_->size() + new_tokens, std::string());
    wp_.special_.assign(wp_.tokens_.size(), false);
    filled_.assign(wp_.tokens_.size(), false);
    wp_.vocab_.reserve(vocab_->size());
    for (const auto& [token, v] : vocab_->items()) {
      const int32_t id = read_id(v, "model.vocab[\"" + token + "\"]");
      place(id, token, "model.vocab");
      wp_.vocab_.emplace(token, id);
      wp_.max_token_bytes_ = std::max(wp_.max_token_bytes_, token.size());
    }
    for (const Added& a : added_) {
      if (!vocab_->contains(a.content)) {
        place(a.id, a.content, "added_tokens");
        wp_.added_.emplace(a.content, a.id);
      }
      if (a.special) {
        wp_.special_[a.id] = true;
        wp_.specials_.emplace(a.content, a.id);
      }
    }
    const auto unk = wp_.vocab_.find(unk_token_);
    if (unk == wp_.vocab_.end()) fail("model.unk_token \"" + unk_token_ + "\" is not in model.vocab");
    wp_.unk_id_ = unk->second;
  }

  void read_normalizer(const json& n) {
    if (n.is_null()) return;
    if (!has_type(n, "BertNormalizer"))
      fail("normalizer " + describe(n) + " is not supported (WordPiece reads \"BertNormalizer\" or null)");
    BertNormalizerOptions o;
    o.clean_text = optional_bool(n, "clean_text", "normalizer.clean_text").value_or(true);
    o.handle_chinese_chars = optional_bool(n, "handle_chinese_chars", "normalizer.handle_chinese_chars").value_or(true);
    o.strip_accents = optional_bool(n, "strip_accents", "normalizer.strip_accents");
    o.lowercase = optional_bool(n, "lowercase", "normalizer.lowercase").value_or(true);
    wp_.normalizer_ = o;
  }

  void read_pre_tokenizer(const json& p) {
    if (p.is_null()) return;
    if (!has_type(p, "BertPreTokenizer"))
      fail("pre_tokenizer " + describe(p) + " is not supported (WordPiece reads \"BertPreTokenizer\" or null)");
    wp_.bert_pretokenizer_ = true;
  }

  void read_decoder(const json& d) {
    if (d.is_null()) return;
    if (!has_type(d, "WordPiece")) fail("decoder " + describe(d) + " is not supported (WordPiece reads \"WordPiece\" or null)");
    wp_.wordpiece_decoder_ = true;
    if (d.contains("prefix")) wp_.decoder_prefix_ = string_field(d, "prefix", "decoder.prefix");
    wp_.decoder_cleanup_ = optional_bool(d, "cleanup", "decoder.cleanup").value_or(true);
  }

  void read_post_processor(const json& p) {
    if (p.is_null()) return;
    if (has_type(p, "BertProcessing")) {
      read_bert_processing(p);
    } else if (has_type(p, "TemplateProcessing")) {
      read_template(p);
    } else {
      fail("post_processor " + describe(p) +
           " is not supported (WordPiece reads \"TemplateProcessing\", \"BertProcessing\" or null)");
    }
  }

  // {"sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}: [CLS] $A [SEP].
  void read_bert_processing(const json& p) {
    auto special = [&](const char* key) {
      const std::string name = std::string("post_processor.") + key;
      const json& v = field(p, key, name);
      if (!v.is_array() || v.size() != 2 || !v[0].is_string()) fail(name + " is not [\"token\", id]");
      return checked_id(read_id(v[1], name + "[1]"), name);
    };
    wp_.template_ = {{false, {special("cls")}}, {true, {}}, {false, {special("sep")}}};
  }

  void read_template(const json& p) {
    const json& single = field(p, "single", "post_processor.single");
    if (!single.is_array()) fail("post_processor.single is not a JSON array");
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    for (size_t i = 0; i < single.size(); ++i) {
      const json& piece = single[i];
      const std::string name = "post_processor.single[" + std::to_string(i) + "]";
      if (piece.is_object() && piece.contains("Sequence")) {
        if (!piece["Sequence"].is_object() || piece["Sequence"].value("id", "") != "A")
          fail(name + ": a single-sequence template can only hold sequence \"A\"");
        wp_.template_.push_back({true, {}});
      } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
                 piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string()) {
        wp_.template_.push_back({false, template_ids(specials, piece["SpecialToken"]["id"].get<std::string>(), name)});
      } else {
        fail(name + " " + describe(piece) + " is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
      }
    }
  }

  std::vector<int32_t> template_ids(const json& specials, const std::string& token, const std::string& where) const {
    if (!specials.is_object() || !specials.contains(token))
      fail(where + ": \"" + token + "\" is not in post_processor.special_tokens");
    const std::string name = "post_processor.special_tokens[\"" + token + "\"].ids";
    const json& ids = specials[token].is_object() ? specials[token].value("ids", json()) : json();
    if (!ids.is_array()) fail(name + " is missing or not a JSON array");
    std::vector<int32_t> out;
    for (const json& id : ids) out.push_back(checked_id(read_id(id, name), name));
    return out;
  }

  int32_t checked_id(int32_t id, const std::string& name) const {
    if (id >= static_cast<int64_t>(wp_.tokens_.size()))
      fail(name + ": id " + std::to_string(id) + " is out of range (the vocabulary has " +
           std::to_string(wp_.tokens_.size()) + " tokens)");
    return id;
  }

  // Added tokens to cut out: unnormalized ones as written, normalized ones in their normalized form.
  void add_patterns() {
    for (const Added& a : added_) {
      AddedTokenPattern p{a.content, a.id, a.single_word, a.lstrip, a.rstrip};
      if (!a.normalized) {
        wp_.raw_added_.add(std::move(p));
        continue;
      }
      if (wp_.normalizer_) {
        p.text.clear();
        bert_normalize(a.content, *wp_.normalizer_, p.text);
      }
      wp_.normalized_added_.add(std::move(p));
    }
  }

  std::string path_;
  WordPiece wp_;
  const json* vocab_ = nullptr;
  std::string unk_token_;
  std::vector<Added> added_;
  std::vector<bool> filled_;
};

WordPiece WordPiece::load(const std::string& tokenizer_json_path) {
  return WordPieceLoader(tokenizer_json_path).load();
}

}  // namespace qkv::text
