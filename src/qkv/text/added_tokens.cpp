#include "qkv/text/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "qkv/text/bert_unicode.h"

namespace qkv::text {

namespace {

// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, Join_Control.
bool is_word_char(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  const uint32_t mask = U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK;
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(cp) & mask) != 0 ||
         u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL);
}

char32_t last_char(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return bert::next_char(s, start);
}

bool is_single_word(std::string_view text, size_t start, size_t stop) {
  if (start > 0 && is_word_char(last_char(text.substr(0, start)))) return false;
  size_t at = stop;
  return stop == text.size() || !is_word_char(bert::next_char(text, at));
}

// The start of the whitespace that ends text[0, end).
size_t whitespace_before(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t at = start;
    if (!bert::is_whitespace(bert::next_char(text, at))) break;
    end = start;
  }
  return end;
}

// The end of the whitespace that starts at `pos`.
size_t whitespace_after(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!bert::is_whitespace(bert::next_char(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedTokenMatcher::add(AddedTokenPattern pattern) {
  if (pattern.text.empty()) return;  // matches nothing, as in `tokenizers`
  first_bytes_[static_cast<unsigned char>(pattern.text[0])] = true;
  patterns_.push_back(std::move(pattern));
}

const AddedTokenPattern* AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  const AddedTokenPattern* best = nullptr;
  for (const AddedTokenPattern& p : patterns_)
    if (text.compare(pos, p.text.size(), p.text) == 0 && (!best || p.text.size() > best->text.size())) best = &p;
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t emitted = 0;  // text before this is in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenPattern* p = first_bytes_[static_cast<unsigned char>(text[pos])] ? longest_at(text, pos) : nullptr;
    if (!p) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + p->text.size();
    pos = stop;  // the search goes on after the match, whatever becomes of it
    if (p->single_word && !is_single_word(text, start, stop)) continue;
    if (p->lstrip) start = std::max(whitespace_before(text, start), emitted);
    if (p->rstrip) stop = whitespace_after(text, stop);
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), p->id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace qkv::text
