#include "qkv/text/legacy_bpe_files.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::text {

namespace {

using nlohmann::json;

// One special token as BartTokenizer holds it: its text and AddedToken options.
struct SpecialToken {
  std::string content;
  bool lstrip = false, rstrip = false, normalized = true;
};

// BartTokenizer's defaults; mask_token given as a string strips the whitespace on its left.
const std::vector<std::pair<std::string, std::string>>& special_defaults() {
  static const std::vector<std::pair<std::string, std::string>> defaults{
      {"bos_token", "<s>"}, {"eos_token", "</s>"},  {"sep_token", "</s>"}, {"cls_token", "<s>"},
      {"unk_token", "<unk>"}, {"pad_token", "<pad>"}, {"mask_token", "<mask>"}};
  return defaults;
}

// A special token field: a string, or an AddedToken object ({"content", "lstrip", ...}; old files
// add "__type": "AddedToken").
SpecialToken read_special(const json& v, const std::string& key, const std::string& where) {
  SpecialToken t;
  t.lstrip = key == "mask_token";
  if (v.is_string()) {
    t.content = v.get<std::string>();
    return t;
  }
  QKV_CHECK(v.is_object() && v.contains("content") && v.at("content").is_string(),
            where << ": field \"" << key << "\" is " << v.dump() << ", expected a string or an object with \"content\"");
  t.content = v.at("content").get<std::string>();
  t.lstrip = read_json_bool(v, "lstrip", false, where);
  t.rstrip = read_json_bool(v, "rstrip", false, where);
  t.normalized = read_json_bool(v, "normalized", true, where);
  QKV_CHECK(!read_json_bool(v, "single_word", false, where),
            where << ": field \"" << key << "\": single_word true is not supported");
  return t;
}

// The special tokens: special_tokens_map.json's, which from_pretrained lets override
// tokenizer_config.json's, else tokenizer_config.json's, else BartTokenizer's defaults.
std::map<std::string, SpecialToken> special_tokens(const std::string& dir, const json& config) {
  const std::string map_path = dir + "/special_tokens_map.json";
  const json map = file_exists(map_path) ? read_json_object(map_path, "a special_tokens_map.json") : json::object();
  std::map<std::string, SpecialToken> out;
  for (const auto& [key, fallback] : special_defaults()) {
    if (map.contains(key) && !map.at(key).is_null()) out[key] = read_special(map.at(key), key, map_path);
    else if (config.contains(key) && !config.at(key).is_null())
      out[key] = read_special(config.at(key), key, dir + "/tokenizer_config.json");
    else out[key] = read_special(json(fallback), key, "");
  }
  return out;
}

int64_t vocab_id(const json& vocab, const std::string& token, const std::string& where) {
  const auto it = vocab.find(token);
  QKV_CHECK(it != vocab.end() && it->is_number_integer(),
            where << ": \"" << token << "\" is not in " << kBpeVocabFile << " (byte-level BPE reads its special tokens there)");
  return it->get<int64_t>();
}

// merges.txt as [a, b] pairs in rank order: the "#version" line and empty lines skipped; each
// part and the merged token must be in vocab.json.
json read_merges(const std::string& path, const json& vocab) {
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open for reading");
  json merges = json::array();
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    QKV_CHECK(space != std::string::npos && space > 0 && line.find(' ', space + 1) == std::string::npos,
              path << ": line " << number << " \"" << line << "\" is not two tokens separated by one space");
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    for (const std::string& token : {left, right, left + right})
      QKV_CHECK(vocab.contains(token), path << ": line " << number << " \"" << line << "\": \"" << token
                                            << "\" is not in " << kBpeVocabFile);
    merges.push_back(json::array({left, right}));
  }
  return merges;
}

json added_token(int64_t id, const SpecialToken& t, bool special) {
  return {{"id", id},         {"content", t.content}, {"single_word", false},  {"lstrip", t.lstrip},
          {"rstrip", t.rstrip}, {"normalized", t.normalized}, {"special", special}};
}

// The special tokens (each text once), then added_tokens.json's, by id: every id once.
json added_tokens(const std::string& dir, const json& vocab, const std::map<std::string, SpecialToken>& specials) {
  std::map<int64_t, json> by_id;
  for (const auto& [key, t] : specials) {
    const int64_t id = vocab_id(vocab, t.content, dir + " (" + key + ")");
    by_id.emplace(id, added_token(id, t, true));
  }
  const std::string added_path = dir + "/added_tokens.json";
  if (file_exists(added_path)) {
    const json added = read_json_object(added_path, "an added_tokens.json (token -> id)");
    for (const auto& [content, id] : added.items()) {
      QKV_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0,
                added_path << ": \"" << content << "\" has id " << id.dump() << ", expected an id");
      const auto taken = by_id.find(id.get<int64_t>());
      if (taken != by_id.end() && taken->second["content"] == content) continue;  // a special token again
      QKV_CHECK(taken == by_id.end() && (!vocab.contains(content) || vocab.at(content) == id),
                added_path << ": \"" << content << "\" has id " << id.dump() << ", which another token has");
      by_id.emplace(id.get<int64_t>(), added_token(id.get<int64_t>(), SpecialToken{content, false, false, true}, false));
    }
  }
  json out = json::array();
  for (auto& [id, token] : by_id) out.push_back(std::move(token));
  return out;
}

}  // namespace

bool legacy_bpe_files_present(const std::string& dir) {
  return file_exists(dir + "/" + kBpeVocabFile) && file_exists(dir + "/" + kBpeMergesFile);
}

std::string roberta_tokenizer_json(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json";
  const json config = file_exists(config_path) ? read_json_object(config_path, "a tokenizer_config.json") : json::object();
  const bool add_prefix_space = read_json_bool(config, "add_prefix_space", false, config_path);
  const bool trim_offsets = read_json_bool(config, "trim_offsets", true, config_path);
  const json vocab = read_json_object(dir + "/" + kBpeVocabFile, "a vocab.json (token -> id)");
  const std::map<std::string, SpecialToken> specials = special_tokens(dir, config);
  const auto pair_of = [&](const char* key) {
    const std::string& token = specials.at(key).content;
    return json::array({token, vocab_id(vocab, token, dir + " (" + key + ")")});
  };
  json t = json::object();
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = added_tokens(dir, vocab, specials);
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
                        {"use_regex", true}};
  t["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", pair_of("sep_token")}, {"cls", pair_of("cls_token")},
                         {"trim_offsets", trim_offsets}, {"add_prefix_space", add_prefix_space}};
  t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", read_merges(dir + "/" + kBpeMergesFile, vocab)}};
  return t.dump(1) + "\n";
}

}  // namespace qkv::text
