#include "qkv/text/marian_tokenizer.h"

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/text/cleanup.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::text {

bool MarianTokenizer::present(const std::string& dir) {
  return file_exists(dir + "/" + kMarianVocab) && file_exists(dir + "/" + kMarianSourceSpm);
}

MarianTokenizer::MarianTokenizer(SentencePiece spm, std::string vocab_path)
    : spm_(std::move(spm)), vocab_path_(std::move(vocab_path)) {}

std::unique_ptr<MarianTokenizer> MarianTokenizer::load(const std::string& dir, bool target) {
  bool separate = false, clean_up = false;
  const std::string config_path = dir + "/" + kTokenizerConfig;
  if (file_exists(config_path)) {
    const nlohmann::json config = read_json_object(config_path, "a tokenizer_config.json");
    separate = read_json_bool(config, "separate_vocabs", false, config_path);
    clean_up = read_json_bool(config, "clean_up_tokenization_spaces", false, config_path);
  }
  const std::string spm_path = dir + "/" + (target ? kMarianTargetSpm : kMarianSourceSpm);
  const std::string vocab_path = dir + "/" + (target && separate ? kMarianTargetVocab : kMarianVocab);
  QKV_CHECK(file_exists(spm_path), spm_path << ": missing (a Marian tokenizer has source.spm, target.spm and vocab.json)");
  std::unique_ptr<MarianTokenizer> t(new MarianTokenizer(SentencePiece(spm_path), vocab_path));
  t->clean_up_spaces_ = clean_up;
  const nlohmann::json vocab = read_json_object(vocab_path, "a vocabulary (a JSON object of piece -> id)");
  QKV_CHECK(!vocab.empty(), vocab_path << ": the vocabulary is empty");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    QKV_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 && it.value().get<int64_t>() < (1 << 24),
              vocab_path << ": the id of \"" << it.key() << "\" is " << it.value().dump()
                         << ", expected an integer in [0, 2^24)");
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    t->ids_.emplace(it.key(), id);
    if (static_cast<size_t>(id) >= t->pieces_.size()) t->pieces_.resize(static_cast<size_t>(id) + 1);
    QKV_CHECK(t->pieces_[static_cast<size_t>(id)].empty(),
              vocab_path << ": id " << id << " is given to both \"" << t->pieces_[static_cast<size_t>(id)] << "\" and \""
                         << it.key() << "\"");
    t->pieces_[static_cast<size_t>(id)] = it.key();
  }
  t->vocab_size_ = static_cast<int64_t>(t->pieces_.size());
  for (const auto& [piece, id] : {std::pair<const char*, int32_t*>{"</s>", &t->eos_}, {"<unk>", &t->unk_}, {"<pad>", &t->pad_}}) {
    const auto found = t->ids_.find(piece);
    QKV_CHECK(found != t->ids_.end(), vocab_path << ": the vocabulary has no \"" << piece << "\"");
    *id = found->second;
    t->specials_.add({piece, found->second});
  }
  return t;
}

int32_t MarianTokenizer::lookup(const std::string& piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? unk_ : it->second;
}

// MarianTokenizer._tokenize: a language code at the start of the span is one token, and every
// match of >>.+<< is removed (Python's re.sub over the span; `.+` is greedy, so a match runs to
// the last "<<" of the line with at least one character after ">>").
void MarianTokenizer::encode_span(std::string_view span, std::vector<int32_t>& out) const {
  std::string rest;
  size_t pos = 0;
  bool first = true;
  while (pos < span.size()) {
    const size_t open = span.find(">>", pos);
    if (open == std::string_view::npos) break;
    const size_t line_end = std::min(span.size(), span.find('\n', open));
    const size_t close = span.substr(0, line_end).rfind("<<");
    if (close == std::string_view::npos || close < open + 3) {
      rest.append(span.substr(pos, open + 1 - pos));  // no match here: move past one character
      pos = open + 1;
      first = false;
      continue;
    }
    rest.append(span.substr(pos, open - pos));
    if (first && open == 0) out.push_back(lookup(std::string(span.substr(0, close + 2))));
    pos = close + 2;
    first = false;
  }
  rest.append(span.substr(std::min(pos, span.size())));
  for (const std::string& piece : spm_.encode_pieces(rest)) out.push_back(lookup(piece));
}

std::vector<int32_t> MarianTokenizer::encode(std::string_view text) const {
  std::vector<TextSegment> segments;
  specials_.split(text, segments);
  std::vector<int32_t> ids;
  for (const TextSegment& s : segments) {
    if (s.added_id >= 0) ids.push_back(s.added_id);
    else encode_span(s.text, ids);
  }
  return ids;
}

std::vector<int32_t> MarianTokenizer::with_special_tokens(std::vector<int32_t> ids) const {
  ids.push_back(eos_);
  return ids;
}

std::string MarianTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size_,
              "Marian tokenizer (" << vocab_path_ << "): id " << id << " out of range [0, " << vocab_size_ << ")");
    const std::string& piece = pieces_[static_cast<size_t>(id)];
    if (id == eos_ || id == unk_ || id == pad_ || piece.empty()) continue;  // skip_special_tokens
    pieces.push_back(piece);
  }
  std::string text = spm_.decode_pieces(pieces);
  replace_all(text, kSentencePieceSpace, " ");
  text = python_strip(text);
  return clean_up_spaces_ ? clean_up_tokenization(text) : text;
}

std::string MarianTokenizer::id_to_token(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size_,
            "Marian tokenizer (" << vocab_path_ << "): id " << id << " out of range [0, " << vocab_size_ << ")");
  return pieces_[static_cast<size_t>(id)];
}

int32_t MarianTokenizer::special_token_id(std::string_view token) const {
  if (token == "</s>") return eos_;
  if (token == "<unk>") return unk_;
  if (token == "<pad>") return pad_;
  return -1;
}

}  // namespace qkv::text
