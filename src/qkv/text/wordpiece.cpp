#include "qkv/text/wordpiece.h"

#include <algorithm>

#include "qkv/core/error.h"
#include "qkv/text/bert_pretokenizer.h"

namespace qkv::text {

namespace {

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t count_chars(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return !is_continuation_byte(c); }));
}

// The WordPiece decoder's cleanup, pattern by pattern over the whole piece (Rust's str::replace).
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

void cleanup(std::string& s) {
  static constexpr std::pair<std::string_view, std::string_view> kReplacements[] = {
      {" .", "."},      {" ?", "?"},         {" !", "!"},  {" ,", ","},   {" ' ", "'"},  {" n't", "n't"},
      {" 'm", "'m"},    {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kReplacements) replace_all(s, from, to);
}

}  // namespace

int32_t WordPiece::token_to_id(std::string_view token) const {
  if (const auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  if (const auto it = added_.find(token); it != added_.end()) return it->second;
  return -1;
}

const std::string& WordPiece::id_to_token(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "WordPiece: id " << id << " is out of range [0, " << vocab_size() << ")");
  return tokens_[id];
}

int32_t WordPiece::special_id(std::string_view token) const {
  const auto it = specials_.find(token);
  return it == specials_.end() ? -1 : it->second;
}

std::vector<int32_t> WordPiece::encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::vector<TextSegment> raw_segments, normalized_segments;
  raw_added_.split(text, raw_segments);
  std::string normalized;
  for (const TextSegment& raw : raw_segments) {
    if (raw.added_id >= 0) {
      out.push_back(raw.added_id);
      continue;
    }
    normalized.clear();
    if (normalizer_) {
      bert_normalize(raw.text, *normalizer_, normalized);
    } else {
      normalized.assign(raw.text);
    }
    normalized_segments.clear();
    normalized_added_.split(normalized, normalized_segments);
    for (const TextSegment& seg : normalized_segments) {
      if (seg.added_id >= 0) {
        out.push_back(seg.added_id);
      } else {
        encode_normalized(seg.text, out);
      }
    }
  }
  return out;
}

void WordPiece::encode_normalized(std::string_view normalized, std::vector<int32_t>& out) const {
  std::vector<std::string_view> words;
  if (bert_pretokenizer_) {
    bert_pretokenize(normalized, words);
  } else {
    words.push_back(normalized);
  }
  std::string key;  // reused for prefix + piece: no allocation per lookup once it has grown
  for (const std::string_view word : words) encode_word(word, key, out);
}

// Greedy longest-match-first, as `tokenizers`' WordPiece::tokenize.
void WordPiece::encode_word(std::string_view word, std::string& key, std::vector<int32_t>& out) const {
  if (count_chars(word) > max_input_chars_) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  for (size_t start = 0; start < word.size();) {
    // No token is longer than max_token_bytes_, so shorter ends are the only candidates.
    size_t end = std::min(word.size(), start + max_token_bytes_);
    while (end > start && end < word.size() && is_continuation_byte(word[end])) --end;
    const int32_t id = find_piece(word, start, end, key);
    if (id < 0) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

// The id of the longest vocabulary token word[start, e) for e <= end (prefixed when start > 0), with
// `end` set to that e; or -1.
int32_t WordPiece::find_piece(std::string_view word, size_t start, size_t& end, std::string& key) const {
  while (end > start) {
    const std::string_view piece = word.substr(start, end - start);
    TokenMap::const_iterator it;
    if (start == 0) {
      it = vocab_.find(piece);
    } else {
      key.assign(prefix_);
      key.append(piece);
      it = vocab_.find(std::string_view(key));
    }
    if (it != vocab_.end()) return it->second;
    do --end;
    while (end > start && is_continuation_byte(word[end]));
  }
  return -1;
}

std::vector<int32_t> WordPiece::with_special_tokens(const std::vector<int32_t>& ids) const {
  if (template_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + template_.size());
  for (const TemplatePiece& piece : template_) {
    const std::vector<int32_t>& add = piece.is_sequence ? ids : piece.ids;
    out.insert(out.end(), add.begin(), add.end());
  }
  return out;
}

std::string WordPiece::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string out, piece;
  bool first = true;
  for (const int32_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size(), "WordPiece: decode: id " << id << " is out of range [0, " << vocab_size() << ")");
    if (skip_special_tokens && special_[id]) continue;
    const std::string& token = tokens_[id];
    if (!wordpiece_decoder_) {  // no decoder: `tokenizers` joins the tokens with spaces
      if (!first) out += ' ';
      out += token;
    } else {
      if (first) {
        piece = token;
      } else if (token.compare(0, decoder_prefix_.size(), decoder_prefix_) == 0) {
        piece.assign(token, decoder_prefix_.size());
      } else {
        piece = ' ' + token;
      }
      if (decoder_cleanup_) cleanup(piece);
      out += piece;
    }
    first = false;
  }
  return out;
}

}  // namespace qkv::text
