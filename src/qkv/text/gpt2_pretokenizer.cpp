#include "qkv/text/gpt2_pretokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <cstdint>

// Unicode categories come from ICU rather than a table generated here: ICU is kept current by the
// distribution (Debian 12: ICU 72 = Unicode 15.0, the same version as Oniguruma 6.9.8 inside
// `tokenizers`), whereas a table generated from Python's unicodedata would freeze whatever Unicode
// version that Python had (3.11: Unicode 14.0) and differ on newly assigned letters.

namespace qkv::text {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Char {
  size_t begin;  // byte offset in the text
  CharClass cls;
  char ascii;    // the character when it is ASCII, else 0 (for the contractions and ' ')
};

CharClass classify(UChar32 c) {
  if (c < 0) return CharClass::kOther;  // an ill-formed UTF-8 sequence
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) return CharClass::kSpace;
  return CharClass::kOther;
}

// ASCII is most text: classify it once.
struct AsciiClasses {
  CharClass cls[128];
  AsciiClasses() {
    for (int c = 0; c < 128; ++c) cls[c] = classify(c);
  }
};

std::vector<Char> decode_chars(std::string_view text) {
  static const AsciiClasses ascii;
  std::vector<Char> chars;
  chars.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = static_cast<int32_t>(text.size());
  int32_t i = 0;
  while (i < n) {
    const size_t begin = static_cast<size_t>(i);
    if (s[i] < 0x80) {
      chars.push_back({begin, ascii.cls[s[i]], static_cast<char>(s[i])});
      ++i;
      continue;
    }
    UChar32 c;
    U8_NEXT(s, i, n, c);  // c < 0 for an ill-formed sequence; i moves past its maximal subpart
    chars.push_back({begin, classify(c), 0});
  }
  return chars;
}

// The length in characters of the contraction ('s 't 're 've 'm 'll 'd) starting at i, or 0.
size_t contraction_at(const std::vector<Char>& ch, size_t i) {
  if (ch[i].ascii != '\'' || i + 1 >= ch.size()) return 0;
  const char a = ch[i + 1].ascii;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= ch.size()) return 0;
  const char b = ch[i + 2].ascii;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The end of the run of characters of class `cls` starting at i.
size_t run_end(const std::vector<Char>& ch, size_t i, CharClass cls) {
  while (i < ch.size() && ch[i].cls == cls) ++i;
  return i;
}

// The end (exclusive, in characters) of the piece that starts at character i: the first
// alternative of the pattern that matches there, as the regex engine would choose.
size_t piece_end(const std::vector<Char>& ch, size_t i) {
  if (const size_t len = contraction_at(ch, i)) return i + len;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class.
  if (ch[i].ascii == ' ' && i + 1 < ch.size() && ch[i + 1].cls != CharClass::kSpace)
    return run_end(ch, i + 1, ch[i + 1].cls);
  if (ch[i].cls != CharClass::kSpace) return run_end(ch, i, ch[i].cls);
  // "\s+(?!\S)": the whitespace run, less its last character when a non-space follows (that
  // character then starts the next piece, e.g. " word"); "\s+" when that leaves nothing.
  const size_t end = run_end(ch, i, CharClass::kSpace);
  if (end == ch.size() || end - i == 1) return end;
  return end - 1;
}

}  // namespace

void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& out) {
  const std::vector<Char> ch = decode_chars(text);
  size_t i = 0;
  while (i < ch.size()) {
    const size_t end = piece_end(ch, i);
    const size_t begin_byte = ch[i].begin;
    const size_t end_byte = end < ch.size() ? ch[end].begin : text.size();
    out.push_back(text.substr(begin_byte, end_byte - begin_byte));
    i = end;
  }
}

}  // namespace qkv::text
