#include "qkv/text/bert_normalizer.h"

#include "qkv/text/bert_unicode.h"

namespace qkv::text {

namespace {

bool is_ascii(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// clean_text and handle_chinese_chars, and lowercasing too when no accents are stripped in between.
void clean_and_space(std::string_view text, const BertNormalizerOptions& o, bool lowercase, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    const char32_t c = bert::next_char(text, i);
    if (o.clean_text) {
      if (c == 0 || c == 0xFFFD || bert::is_control(c)) continue;
      if (bert::is_whitespace(c)) {
        out += ' ';
        continue;
      }
    }
    const bool spaced = o.handle_chinese_chars && bert::is_chinese_char(c);
    if (spaced) out += ' ';
    if (lowercase) {
      bert::append_lowercase(c, out);
    } else {
      bert::append_utf8(c, out);
    }
    if (spaced) out += ' ';
  }
}

// After NFD: drops the nonspacing marks and lowercases if asked.
void strip_marks(std::string_view text, bool lowercase, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    const char32_t c = bert::next_char(text, i);
    if (bert::is_nonspacing_mark(c)) continue;
    if (lowercase) {
      bert::append_lowercase(c, out);
    } else {
      bert::append_utf8(c, out);
    }
  }
}

}  // namespace

void bert_normalize(std::string_view text, const BertNormalizerOptions& options, std::string& out) {
  // ASCII has nothing to decompose and no marks, so stripping accents is a no-op there.
  if (!options.strips_accents() || is_ascii(text)) {
    clean_and_space(text, options, options.lowercase, out);
    return;
  }
  std::string cleaned, decomposed;
  clean_and_space(text, options, false, cleaned);
  bert::append_nfd(cleaned, decomposed);
  strip_marks(decomposed, options.lowercase, out);
}

}  // namespace qkv::text
