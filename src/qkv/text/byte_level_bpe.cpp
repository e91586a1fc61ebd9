#include "qkv/text/byte_level_bpe.h"

#include <mutex>
#include <queue>

#include "qkv/core/error.h"
#include "qkv/text/byte_level_alphabet.h"
#include "qkv/text/gpt2_pretokenizer.h"

namespace qkv::text {

// Pieces of ordinary text repeat (words), so their ids are kept. Long pieces are rare and would
// make the cache large, so they are not kept; a full cache starts over rather than tracking age.
struct ByteLevelBpe::WordCache {
  static constexpr size_t kMaxPieceBytes = 256;
  static constexpr size_t kMaxEntries = 1 << 16;
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};

ByteLevelBpe::ByteLevelBpe() : cache_(std::make_unique<WordCache>()) { byte_ids_.fill(-1); }
ByteLevelBpe::ByteLevelBpe(ByteLevelBpe&&) noexcept = default;
ByteLevelBpe& ByteLevelBpe::operator=(ByteLevelBpe&&) noexcept = default;
ByteLevelBpe::~ByteLevelBpe() = default;

std::vector<int32_t> ByteLevelBpe::with_special_tokens(std::vector<int32_t> ids) const {
  if (cls_id_ < 0) return ids;
  ids.insert(ids.begin(), cls_id_);
  ids.push_back(sep_id_);
  return ids;
}

int32_t ByteLevelBpe::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

int32_t ByteLevelBpe::added_token_id(std::string_view token) const {
  for (const auto* added : {&added_raw_, &added_normalized_})
    for (const AddedToken& t : *added)
      if (t.content == token) return t.id;
  return -1;
}

std::string ByteLevelBpe::id_to_token(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "byte-level BPE: id " << id << " is out of range [0, " << vocab_size() << ")");
  return tokens_[id];
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size(), "byte-level BPE: decode: id " << id << " is out of range [0, " << vocab_size() << ")");
    out += token_bytes_[id];
  }
  return out;
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (const Segment& seg : split_added_tokens(text)) {
    if (seg.added_id >= 0) {
      out.push_back(seg.added_id);
    } else {
      encode_segment(seg.text, out);
    }
  }
  return out;
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Cuts `tokens` out of the text segments of `in`, leftmost-longest (as the Aho-Corasick matcher of
// `tokenizers` does): at the first position where any token matches, the longest one wins, and
// the search goes on after it.
template <typename Segment, typename Token>
std::vector<Segment> cut_out(const std::vector<Segment>& in, const std::vector<Token>& tokens) {
  if (tokens.empty()) return in;
  std::vector<Segment> out;
  for (const Segment& seg : in) {
    if (seg.added_id >= 0) {
      out.push_back(seg);
      continue;
    }
    const std::string_view s = seg.text;
    size_t start = 0;  // of the text not yet emitted
    size_t pos = 0;
    while (pos < s.size()) {
      const Token* best = nullptr;
      for (const Token& t : tokens) {
        if (s.compare(pos, t.content.size(), t.content) == 0 && (!best || t.content.size() > best->content.size()))
          best = &t;
      }
      if (!best) {
        ++pos;
        continue;
      }
      // lstrip / rstrip: the match takes the whitespace beside it (ASCII whitespace here; the
      // `tokenizers` crate takes Unicode's), which then belongs to no text segment.
      size_t text_end = pos, after = pos + best->content.size();
      while (best->lstrip && text_end > start && is_ascii_space(s[text_end - 1])) --text_end;
      while (best->rstrip && after < s.size() && is_ascii_space(s[after])) ++after;
      if (text_end > start) out.push_back({s.substr(start, text_end - start), -1});
      out.push_back({s.substr(pos, best->content.size()), best->id});
      pos = after;
      start = pos;
    }
    if (start < s.size()) out.push_back({s.substr(start), -1});
  }
  return out;
}

}  // namespace

std::vector<ByteLevelBpe::Segment> ByteLevelBpe::split_added_tokens(std::string_view text) const {
  std::vector<Segment> segments;
  if (!text.empty()) segments.push_back({text, -1});
  return cut_out(cut_out(segments, added_raw_), added_normalized_);
}

void ByteLevelBpe::encode_segment(std::string_view segment, std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && segment.front() != ' ') {
    prefixed = " ";
    prefixed += segment;
    segment = prefixed;
  }
  if (!use_regex_) {
    encode_piece(segment, out);
    return;
  }
  std::vector<std::string_view> pieces;
  gpt2_pretokenize(segment, pieces);
  for (const std::string_view piece : pieces) encode_piece(piece, out);
}

void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > WordCache::kMaxPieceBytes) {
    const std::vector<int32_t> ids = merge_piece(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->ids.find(key);
    if (it != cache_->ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_piece(piece);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->ids.size() >= WordCache::kMaxEntries) cache_->ids.clear();
  cache_->ids.emplace(std::move(key), std::move(ids));
}

const ByteLevelBpe::Merge* ByteLevelBpe::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right));
  return it == merges_.end() ? nullptr : &it->second;
}

// The merge loop of `tokenizers` (models/bpe/word.rs, merge_all): a heap of candidate merges
// ordered by (rank, position); a popped candidate whose pair has changed since it was pushed is
// skipped, unless the pair now there merges into the same token (their check, kept for equality).
// O(n log n) in the piece's length.
std::vector<int32_t> ByteLevelBpe::merge_piece(std::string_view piece) const {
  if (ignore_merges_) {
    std::string symbols;
    for (const char c : piece) symbols += byte_level_symbols()[static_cast<uint8_t>(c)];
    if (const auto it = ids_.find(symbols); it != ids_.end()) return {it->second};
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices into `syms`, -1 at the ends
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  for (const char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // not in the vocabulary, and there is no unk token: dropped
    const int32_t i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, -1, true});
    if (i > 0) syms[i - 1].next = i;
  }
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    const int32_t next = syms[pos].next;
    if (next < 0) return;
    if (const Merge* m = find_merge(syms[pos].id, syms[next].id)) heap.push({m->rank, pos, m->new_id});
  };
  for (int32_t i = 0; i < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    const Merge* now = find_merge(left.id, right.id);
    if (!now || now->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : syms)
    if (s.alive) ids.push_back(s.id);
  return ids;
}

}  // namespace qkv::text
