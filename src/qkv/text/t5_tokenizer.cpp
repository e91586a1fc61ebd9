#include "qkv/text/t5_tokenizer.h"

#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/cleanup.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::text {

namespace {
using nlohmann::json;
constexpr int64_t kMaxExtraIds = 1 << 16;

std::string extra_id_token(int64_t n) { return "<extra_id_" + std::to_string(n) + ">"; }

// What tokenizer_config.json says, checked field by field.
struct T5Settings {
  int32_t extra_ids = 100;
  bool clean_up = false, add_prefix_space = true;
  json added_tokens = json::object();  // added_tokens_decoder: id -> AddedToken
};

// A token as transformers saves it: a string, or an AddedToken object with its "content".
std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return v.dump();
}

int32_t read_extra_ids(const json& config, const std::string& path) {
  if (!config.contains("extra_ids") || config.at("extra_ids").is_null()) return 100;
  const json& v = config.at("extra_ids");
  QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxExtraIds,
            path << ": field \"extra_ids\" is " << v.dump() << ", expected an integer in [0, " << kMaxExtraIds << "]");
  return static_cast<int32_t>(v.get<int64_t>());
}

// The special tokens T5Tokenizer names must be its own: other ones would be new added tokens.
void check_special_names(const json& config, int32_t extra_ids, const std::string& path) {
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"eos_token", "</s>"}, {"unk_token", "<unk>"},
                                  {"pad_token", "<pad>"}}) {
    if (!config.contains(key) || config.at(key).is_null()) continue;
    QKV_CHECK(token_text(config.at(key)) == name, path << ": field \"" << key << "\" is " << config.at(key).dump()
                                                       << ", expected \"" << name << "\" (T5's own)");
  }
  if (!config.contains("additional_special_tokens") || config.at("additional_special_tokens").is_null()) return;
  const json& extra = config.at("additional_special_tokens");
  QKV_CHECK(extra.is_array(), path << ": field \"additional_special_tokens\" is " << extra.dump() << ", expected a list");
  for (const json& token : extra) {
    bool sentinel = false;
    for (int32_t n = 0; n < extra_ids && !sentinel; ++n) sentinel = token_text(token) == extra_id_token(n);
    QKV_CHECK(sentinel, path << ": field \"additional_special_tokens\" holds " << token.dump() << ", not one of <extra_id_0>.."
                             << "<extra_id_" << extra_ids - 1 << "> (qkv's T5 tokenizer has no other special tokens)");
  }
}

T5Settings read_settings(const std::string& path) {
  T5Settings s;
  if (!file_exists(path)) return s;
  const json config = read_json_object(path, "a tokenizer_config.json");
  s.extra_ids = read_extra_ids(config, path);
  s.clean_up = read_json_bool(config, "clean_up_tokenization_spaces", false, path);
  s.add_prefix_space = read_json_bool(config, "add_prefix_space", true, path);
  QKV_CHECK(read_json_bool(config, "legacy", true, path),
            path << ": field \"legacy\" is false: qkv's T5 tokenizer does only T5Tokenizer's legacy behaviour (true, "
                    "the default)");
  check_special_names(config, s.extra_ids, path);
  if (config.contains("added_tokens_decoder") && !config.at("added_tokens_decoder").is_null()) {
    s.added_tokens = config.at("added_tokens_decoder");
    QKV_CHECK(s.added_tokens.is_object(), path << ": field \"added_tokens_decoder\" is " << s.added_tokens.dump()
                                               << ", expected an object of id -> token");
  }
  return s;
}

// One added_tokens_decoder entry: a special token of T5's at its own id; its lstrip and rstrip.
AddedTokenPattern read_added_token(const std::string& key, const json& entry,
                                   const std::map<int32_t, std::string>& specials, const std::string& path) {
  int32_t id = -1;
  const auto [end, err] = std::from_chars(key.data(), key.data() + key.size(), id);
  const auto it = err == std::errc() && end == key.data() + key.size() ? specials.find(id) : specials.end();
  QKV_CHECK(it != specials.end() && token_text(entry) == it->second,
            path << ": field \"added_tokens_decoder\": id " << key << " is " << entry.dump()
                 << ", not one of T5's special tokens at its id (qkv's T5 tokenizer has no added tokens)");
  AddedTokenPattern p{it->second, id, false, false, false};
  for (const auto& [field, flag] : {std::pair<const char*, bool*>{"single_word", &p.single_word},
                                    {"lstrip", &p.lstrip}, {"rstrip", &p.rstrip}})
    *flag = read_json_bool(entry, field, false, path + ": field \"added_tokens_decoder\" \"" + key + "\"");
  QKV_CHECK(!p.single_word, path << ": field \"added_tokens_decoder\" \"" << key
                                 << "\": single_word tokens are not supported by qkv's T5 tokenizer");
  return p;
}

// T5Tokenizer's own options: the sentinels strip whitespace on both sides, the others none;
// added_tokens_decoder (what save_pretrained writes) may say otherwise.
std::vector<AddedTokenPattern> special_patterns(const std::map<int32_t, std::string>& specials, int32_t spm_size,
                                                const json& added_tokens, const std::string& path) {
  std::map<int32_t, AddedTokenPattern> patterns;
  for (const auto& [id, text] : specials) patterns[id] = {text, id, false, id >= spm_size, id >= spm_size};
  for (auto it = added_tokens.begin(); it != added_tokens.end(); ++it) {
    const AddedTokenPattern p = read_added_token(it.key(), it.value(), specials, path);
    patterns[p.id] = p;
  }
  std::vector<AddedTokenPattern> out;
  for (const auto& [id, p] : patterns) out.push_back(p);
  return out;
}
}  // namespace

bool T5Tokenizer::present(const std::string& dir) {
  return file_exists(dir + "/" + kT5Spm);
}

T5Tokenizer::T5Tokenizer(SentencePiece spm) : spm_(std::move(spm)), spm_size_(spm_.vocab_size()) {}

std::unique_ptr<T5Tokenizer> T5Tokenizer::load(const std::string& dir) {
  const std::string spm_path = dir + "/" + kT5Spm;
  if (!file_exists(spm_path))
    throw NotFoundError(spm_path + ": missing (a T5 tokenizer has spiece.model and, optionally, tokenizer_config.json)");
  std::unique_ptr<T5Tokenizer> t(new T5Tokenizer(SentencePiece(spm_path)));
  for (const auto& [piece, id] : {std::pair<const char*, int32_t*>{"</s>", &t->eos_}, {"<unk>", &t->unk_}, {"<pad>", &t->pad_}}) {
    *id = t->spm_.piece_id(piece);
    QKV_CHECK(*id >= 0, spm_path << ": the SentencePiece model has no \"" << piece << "\" piece (T5's spiece.model has "
                                 << "<pad> 0, </s> 1, <unk> 2)");
  }
  const std::string config_path = dir + "/" + kT5TokenizerConfig;
  const T5Settings s = read_settings(config_path);
  t->extra_ids_ = s.extra_ids;
  t->clean_up_spaces_ = s.clean_up;
  t->add_prefix_space_ = s.add_prefix_space;
  std::map<int32_t, std::string> specials;
  for (const int32_t id : {t->pad_, t->eos_, t->unk_}) specials[id] = t->spm_.piece(id);
  for (int32_t n = 0; n < t->extra_ids_; ++n) specials[t->spm_size_ - 1 + t->extra_ids_ - n] = extra_id_token(n);
  for (const AddedTokenPattern& p : special_patterns(specials, t->spm_size_, s.added_tokens, config_path)) {
    t->specials_by_text_.emplace(p.text, p.id);
    t->specials_.add(p);
  }
  return t;
}

std::vector<int32_t> T5Tokenizer::encode(std::string_view text) const {
  std::vector<TextSegment> segments;
  specials_.split(text, segments);
  std::vector<int32_t> ids;
  for (const TextSegment& s : segments) {
    if (s.added_id >= 0) {
      ids.push_back(s.added_id);
      continue;
    }
    const std::vector<int32_t> span = spm_.encode(s.text);  // each span on its own, as T5Tokenizer (legacy)
    ids.insert(ids.end(), span.begin(), span.end());
  }
  return ids;
}

// T5Tokenizer._add_eos_if_not_present: "</s>" unless the ids end with it already.
std::vector<int32_t> T5Tokenizer::with_special_tokens(std::vector<int32_t> ids) const {
  if (ids.empty() || ids.back() != eos_) ids.push_back(eos_);
  return ids;
}

void T5Tokenizer::check_id(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "T5 tokenizer (" << spm_.path() << " with " << extra_ids_ << " extra ids): id "
                                                           << id << " out of range [0, " << vocab_size() << ")");
}

// _decode with skip_special_tokens, then convert_tokens_to_string: the first piece loses its "▁"
// (add_prefix_space), SentencePiece joins the rest, str.strip().
std::string T5Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    check_id(id);
    if (!is_special(id)) pieces.push_back(spm_.piece(id));
  }
  if (pieces.empty()) return "";
  if (add_prefix_space_ && pieces[0].starts_with(kSentencePieceSpace)) pieces[0].erase(0, kSentencePieceSpace.size());
  std::string text = python_strip(spm_.decode_pieces(pieces));
  return clean_up_spaces_ ? clean_up_tokenization(text) : text;
}

std::string T5Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return id < spm_size_ ? spm_.piece(id) : extra_id_token(int64_t{spm_size_} - 1 + extra_ids_ - id);
}

int32_t T5Tokenizer::special_token_id(std::string_view token) const {
  const auto it = specials_by_text_.find(std::string(token));
  return it == specials_by_text_.end() ? -1 : it->second;
}

}  // namespace qkv::text
