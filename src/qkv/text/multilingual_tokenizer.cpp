#include "qkv/text/multilingual_tokenizer.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/text/cleanup.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::text {

namespace {
using nlohmann::json;
using Kind = MultilingualTokenizer::Kind;
// fairseq's dictionaries start with these four; the SentencePiece ids come after them (offset 1:
// SentencePiece's own <unk> 0 is fairseq's 3, its <s> 1 and </s> 2 are never produced).
constexpr std::pair<const char*, int32_t> kFairseqSpecials[] = {{"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
constexpr int32_t kFairseqOffset = 1;

void require_file(const std::string& path, const std::string& what) {
  QKV_CHECK(file_exists(path), path << ": missing (" << what << ")");
}

Kind kind_of(const json& config, const std::string& path) {
  QKV_CHECK(config.contains("tokenizer_class") && config.at("tokenizer_class").is_string(),
            path << ": field \"tokenizer_class\" is missing (expected M2M100Tokenizer, NllbTokenizer, MBartTokenizer "
                    "or MBart50Tokenizer)");
  std::string name = config.at("tokenizer_class").get<std::string>();
  if (name.ends_with("Fast")) name.resize(name.size() - 4);  // the same files and ids
  if (name == "M2M100Tokenizer") return Kind::M2M100;
  if (name == "NllbTokenizer") return Kind::Nllb;
  if (name == "MBart50Tokenizer") return Kind::MBart50;
  if (name == "MBartTokenizer") return Kind::MBart;
  throw Error(path + ": field \"tokenizer_class\" is \"" + config.at("tokenizer_class").get<std::string>() +
              "\": not supported (qkv reads M2M100Tokenizer, NllbTokenizer, MBartTokenizer and MBart50Tokenizer "
              "with sentencepiece.bpe.model)");
}

const char* class_default_language(Kind kind) {
  switch (kind) {
    case Kind::M2M100: return "en";
    case Kind::Nllb: return "eng_Latn";
    default: return "en_XX";
  }
}

std::string string_field(const json& config, const char* key, const std::string& fallback, const std::string& path) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  QKV_CHECK(config.at(key).is_string(), path << ": field \"" << key << "\" is " << config.at(key).dump()
                                             << ", expected a string");
  return config.at(key).get<std::string>();
}

bool is_named_special(const std::string& token) {
  return token == "<s>" || token == "<pad>" || token == "</s>" || token == "<unk>" || token == "<mask>";
}
}  // namespace

bool MultilingualTokenizer::present(const std::string& dir) { return file_exists(dir + "/" + kFairseqSpm); }

std::vector<std::string> MultilingualTokenizer::files(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* name : {kFairseqSpm, kM2M100Vocab, kMultilingualTokenizerConfig})
    if (file_exists(dir + "/" + name)) out.emplace_back(name);
  // A tokenizer saved before transformers 4.34 may list its language codes there only.
  const std::string config_path = dir + "/" + kMultilingualTokenizerConfig;
  if (file_exists(config_path) && file_exists(dir + "/special_tokens_map.json") &&
      !read_json_object(config_path, "a tokenizer_config.json").contains("added_tokens_decoder"))
    out.emplace_back("special_tokens_map.json");
  return out;
}

std::unique_ptr<MultilingualTokenizer> MultilingualTokenizer::load(const std::string& dir) {
  const std::string config_path = dir + "/" + kMultilingualTokenizerConfig;
  require_file(config_path, "qkv reads tokenizer_class and the language codes there, as transformers' "
                            "save_pretrained writes them");
  const json config = read_json_object(config_path, "a tokenizer_config.json");
  std::unique_ptr<MultilingualTokenizer> t(new MultilingualTokenizer());
  t->dir_ = dir;
  t->kind_ = kind_of(config, config_path);
  t->load_piece_ids(dir);
  if (config.contains("added_tokens_decoder") && !config.at("added_tokens_decoder").is_null()) {
    QKV_CHECK(config.at("added_tokens_decoder").is_object(),
              config_path << ": field \"added_tokens_decoder\" is not an object of id -> token (the language codes' ids)");
    t->add_added_tokens(config_path, config.at("added_tokens_decoder"));
  } else {
    t->add_added_tokens(config_path, t->legacy_added_tokens(dir, config));
  }
  t->language_first_ = t->kind_ != Kind::MBart;
  if (t->kind_ == Kind::Nllb && read_json_bool(config, "legacy_behaviour", false, config_path)) t->language_first_ = false;
  t->clean_up_spaces_ = read_json_bool(config, "clean_up_tokenization_spaces", false, config_path);
  t->src_lang_ = string_field(config, "src_lang", class_default_language(t->kind_), config_path);
  QKV_CHECK(t->language_id(t->src_lang_) >= 0, config_path << ": field \"src_lang\" is \"" << t->src_lang_
                                                           << "\", not a language of the tokenizer ("
                                                           << t->some_languages() << ")");
  return t;
}

// The ids of SentencePiece's pieces: vocab.json's (M2M100) or the SentencePiece ids + 1 (fairseq).
void MultilingualTokenizer::load_piece_ids(const std::string& dir) {
  const std::string spm_path = dir + "/" + kFairseqSpm;
  require_file(spm_path, "the SentencePiece model of an M2M100, NLLB or mBART tokenizer");
  spm_ = std::make_unique<SentencePiece>(spm_path);
  if (kind_ != Kind::M2M100) {
    vocab_size_ = int64_t{spm_->vocab_size()} + kFairseqOffset;
    return;
  }
  const std::string vocab_path = dir + "/" + kM2M100Vocab;
  require_file(vocab_path, "M2M100's vocabulary of piece -> id");
  const json vocab = read_json_object(vocab_path, "a vocabulary (a JSON object of piece -> id)");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    QKV_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 && it.value().get<int64_t>() < (1 << 24),
              vocab_path << ": the id of \"" << it.key() << "\" is " << it.value().dump()
                         << ", expected an integer in [0, 2^24)");
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    if (static_cast<size_t>(id) >= vocab_pieces_.size()) vocab_pieces_.resize(static_cast<size_t>(id) + 1);
    QKV_CHECK(vocab_pieces_[static_cast<size_t>(id)].empty(), vocab_path << ": id " << id << " is given to both \""
                                                                          << vocab_pieces_[static_cast<size_t>(id)]
                                                                          << "\" and \"" << it.key() << "\"");
    vocab_pieces_[static_cast<size_t>(id)] = it.key();
    vocab_.emplace(it.key(), id);
  }
  for (const auto& [piece, id] : {std::pair<const char*, int32_t*>{"</s>", &eos_}, {"<unk>", &unk_}}) {
    const auto found = vocab_.find(piece);
    QKV_CHECK(found != vocab_.end(), vocab_path << ": the vocabulary has no \"" << piece << "\"");
    *id = found->second;
  }
  vocab_size_ = static_cast<int64_t>(vocab_pieces_.size());
}

namespace {
// The language codes a tokenizer_config.json (or special_tokens_map.json) of transformers before
// 4.34 lists as additional_special_tokens, in their order: strings or AddedToken objects.
std::vector<std::string> listed_language_codes(const std::string& dir, const json& config, const std::string& config_path) {
  const std::string map_path = dir + "/special_tokens_map.json";
  json listed = config.value("additional_special_tokens", json());
  std::string where = config_path;
  if ((!listed.is_array() || listed.empty()) && file_exists(map_path)) {
    listed = read_json_object(map_path, "a special_tokens_map.json").value("additional_special_tokens", json());
    where = map_path;
  }
  QKV_CHECK(listed.is_array() && !listed.empty(),
            config_path << ": field \"added_tokens_decoder\" is missing, and no additional_special_tokens (here or in "
                           "special_tokens_map.json) list the language codes whose ids transformers before 4.34 "
                           "computed; save the tokenizer again with transformers >= 4.34");
  std::vector<std::string> codes;
  for (const json& code : listed) {
    const json& content = code.is_object() ? code.value("content", json()) : code;
    QKV_CHECK(content.is_string() && !content.get<std::string>().empty(),
              where << ": field \"additional_special_tokens\" holds " << code.dump() << ", not a language code");
    codes.push_back(content.get<std::string>());
  }
  return codes;
}

json added_entry(const std::string& content, bool lstrip) {
  return {{"content", content}, {"lstrip", lstrip}, {"rstrip", false}, {"single_word", false}, {"special", true}};
}
}  // namespace

// What transformers before 4.34 computed instead of writing added_tokens_decoder: the four
// specials at their ids; the language codes (additional_special_tokens, in order) after the pieces:
// M2M100 at vocab.json's size + i, the fairseq classes at the SentencePiece size + 1 + i; and
// NLLB's and mBART's <mask> (stripping the space on its left) after the codes. This is fairseq's
// layout, which the released models have; transformers 4.47 reads such an NLLB directory with
// <mask> before the codes, one id off, so qkv follows the version that wrote it.
json MultilingualTokenizer::legacy_added_tokens(const std::string& dir, const json& config) const {
  const std::string config_path = dir + "/" + kMultilingualTokenizerConfig;
  const std::vector<std::string> codes = listed_language_codes(dir, config, config_path);
  json added = json::object();
  for (const auto& [token, fairseq_id] : kFairseqSpecials) {
    int32_t id = fairseq_id;
    if (kind_ == Kind::M2M100) {
      const auto found = vocab_.find(token);
      QKV_CHECK(found != vocab_.end(), dir << "/" << kM2M100Vocab << ": the vocabulary has no \"" << token << "\"");
      id = found->second;
    }
    added[std::to_string(id)] = added_entry(token, false);
  }
  const int64_t first = vocab_size_;  // after the pieces (the fairseq ids include the offset)
  for (size_t i = 0; i < codes.size(); ++i) added[std::to_string(first + static_cast<int64_t>(i))] = added_entry(codes[i], false);
  if (kind_ != Kind::M2M100)
    added[std::to_string(first + static_cast<int64_t>(codes.size()))] = added_entry("<mask>", true);
  return added;
}

// added_tokens_decoder: id -> {"content", "lstrip", "rstrip", "single_word", "special"}. The
// language codes are the special ones other than <s> <pad> </s> <unk> <mask>.
void MultilingualTokenizer::add_added_tokens(const std::string& config_path, const json& added) {
  for (auto it = added.begin(); it != added.end(); ++it) {
    const std::string where = config_path + ": field \"added_tokens_decoder\" \"" + it.key() + "\"";
    int32_t id = -1;
    const auto [end, err] = std::from_chars(it.key().data(), it.key().data() + it.key().size(), id);
    QKV_CHECK(err == std::errc() && end == it.key().data() + it.key().size() && id >= 0 && id < (1 << 24),
              where << ": not an id");
    const json& entry = it.value();
    QKV_CHECK(entry.is_object() && entry.contains("content") && entry.at("content").is_string(),
              where << ": expected an object with \"content\"");
    const std::string content = entry.at("content").get<std::string>();
    if (kind_ != Kind::M2M100 && id < static_cast<int32_t>(std::size(kFairseqSpecials)))
      QKV_CHECK(content == kFairseqSpecials[id].first, where << ": is \"" << content << "\", but fairseq's id " << id
                                                             << " is " << kFairseqSpecials[id].first);
    AddedTokenPattern p{content, id, false, false, false};
    for (const auto& [field, flag] : {std::pair<const char*, bool*>{"single_word", &p.single_word},
                                      {"lstrip", &p.lstrip}, {"rstrip", &p.rstrip}})
      *flag = read_json_bool(entry, field, false, where);
    QKV_CHECK(!p.single_word, where << ": single_word tokens are not supported by qkv's tokenizer");
    const bool special = read_json_bool(entry, "special", true, where);
    added_[id] = content;
    added_ids_[content] = id;
    added_special_[id] = special;
    if (special && !is_named_special(content)) languages_[content] = id;
    matcher_.add(p);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{id} + 1);
  }
}

int32_t MultilingualTokenizer::language_id(std::string_view language) const {
  if (kind_ == Kind::M2M100 && !language.starts_with("__")) {
    const auto it = languages_.find("__" + std::string(language) + "__");
    if (it != languages_.end()) return it->second;
  }
  const auto it = languages_.find(std::string(language));
  return it == languages_.end() ? -1 : it->second;
}

std::string MultilingualTokenizer::some_languages() const {
  std::string out;
  size_t shown = 0;
  for (const auto& [code, id] : languages_) {
    if (shown++ == 5) return out + " ... " + std::to_string(languages_.size()) + " in all";
    out += (out.empty() ? "" : ", ") + code;
  }
  return out.empty() ? "none" : out;
}

std::vector<int32_t> MultilingualTokenizer::with_language(std::vector<int32_t> ids, int32_t language) const {
  if (language_first_) ids.insert(ids.begin(), language);
  ids.push_back(eos_);
  if (!language_first_) ids.push_back(language);
  return ids;
}

std::vector<int32_t> MultilingualTokenizer::with_special_tokens(std::vector<int32_t> ids) const {
  return with_language(std::move(ids), language_id(src_lang_));
}

int32_t MultilingualTokenizer::piece_to_id(const std::string& piece) const {
  if (kind_ == Kind::M2M100) {
    const auto it = vocab_.find(piece);
    return it == vocab_.end() ? unk_ : it->second;
  }
  const int32_t spm_id = spm_->piece_id(piece);
  return spm_id > 0 ? spm_id + kFairseqOffset : unk_;  // SentencePiece's unknown (0) is fairseq's <unk>
}

std::vector<int32_t> MultilingualTokenizer::encode(std::string_view text) const {
  std::vector<TextSegment> segments;
  matcher_.split(text, segments);
  std::vector<int32_t> ids;
  for (const TextSegment& s : segments) {
    if (s.added_id >= 0) {
      ids.push_back(s.added_id);
      continue;
    }
    for (const std::string& piece : spm_->encode_pieces(s.text)) ids.push_back(piece_to_id(piece));
  }
  return ids;
}

void MultilingualTokenizer::check_id(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size_, "multilingual tokenizer (" << dir_ << "): id " << id << " out of range [0, "
                                                                    << vocab_size_ << ")");
}

std::string MultilingualTokenizer::id_to_token(int32_t id) const {
  check_id(id);
  if (const auto it = added_.find(id); it != added_.end()) return it->second;
  if (kind_ == Kind::M2M100) {
    const std::string& piece = vocab_pieces_[static_cast<size_t>(id)];
    return piece.empty() ? "<unk>" : piece;  // M2M100Tokenizer: decoder.get(index, unk_token)
  }
  if (id < static_cast<int32_t>(std::size(kFairseqSpecials))) return kFairseqSpecials[id].first;
  QKV_CHECK(id - kFairseqOffset < spm_->vocab_size(),
            "multilingual tokenizer (" << dir_ << "): id " << id << " is neither a piece nor an added token");
  return spm_->piece(id - kFairseqOffset);
}

int32_t MultilingualTokenizer::special_token_id(std::string_view token) const {
  if (const auto it = added_ids_.find(std::string(token)); it != added_ids_.end()) return it->second;
  if (kind_ == Kind::M2M100) {
    const auto it = vocab_.find(std::string(token));
    return it != vocab_.end() && is_named_special(it->first) ? it->second : -1;
  }
  for (const auto& [name, id] : kFairseqSpecials)
    if (token == name) return id;
  return -1;
}

// convert_tokens_to_string of the class, then str.strip().
std::string MultilingualTokenizer::join_pieces(const std::vector<std::string>& pieces) const {
  if (kind_ == Kind::M2M100 || kind_ == Kind::MBart50) return python_strip(spm_->decode_pieces(pieces));
  std::string text;
  for (const std::string& p : pieces) text += p;
  replace_all(text, kSentencePieceSpace, " ");
  return python_strip(text);
}

// PreTrainedTokenizer._decode with skip_special_tokens=True: special tokens left out, other added
// tokens kept as words of their own between the joined pieces (spaces_between_special_tokens).
std::string MultilingualTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> sub_texts, pieces;
  for (const int32_t id : ids) {
    const std::string token = id_to_token(id);
    const auto added = added_special_.find(id);
    if ((added != added_special_.end() && added->second) || is_named_special(token)) continue;
    if (added == added_special_.end()) {
      pieces.push_back(token);
      continue;
    }
    if (!pieces.empty()) {
      std::string joined = join_pieces(pieces);
      if (!joined.empty()) sub_texts.push_back(std::move(joined));
      pieces.clear();
    }
    sub_texts.push_back(token);
  }
  if (!pieces.empty()) sub_texts.push_back(join_pieces(pieces));
  std::string text;
  for (size_t i = 0; i < sub_texts.size(); ++i) text += (i ? " " : "") + sub_texts[i];
  return clean_up_spaces_ ? clean_up_tokenization(text) : text;
}

}  // namespace qkv::text
