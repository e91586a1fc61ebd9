#include "qkv/text/bert_unicode.h"

#include <unicode/bytestream.h>
#include <unicode/utf8.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include "qkv/core/error.h"

namespace qkv::text::bert {

namespace {

// `unicode_categories` knows only the characters of Unicode 8.0; the others have no category there.
bool assigned_by_unicode_8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] != 0 && age[0] <= 8;
}

// Characters whose category changed after Unicode 8.0, with their 8.0 category.
bool was_punctuation_in_8(char32_t c) { return c == 0x166D || c == 0x111C9; }
bool was_nonspacing_mark_in_8(char32_t c) { return c == 0x1734; }
bool was_not_nonspacing_mark_in_8(char32_t c) { return c == 0x1885 || c == 0x1886 || c == 0xA9BD || c == 0x111C9; }

// Lowercase pairs of Unicode 16 (Rust's tables) that ICU 72 (Unicode 15) does not have yet.
char32_t unicode_16_lowercase(char32_t c) {
  switch (c) {
    case 0x1C89: return 0x1C8A;
    case 0xA7CB: return 0x0264;
    case 0xA7CC: return 0xA7CD;
    case 0xA7DA: return 0xA7DB;
    case 0xA7DC: return 0x019B;
    default: return c >= 0x10D50 && c <= 0x10D65 ? c + 0x20 : c;  // Garay
  }
}

}  // namespace

bool is_whitespace(char32_t c) {
  if (c < 128) return c == ' ' || (c >= '\t' && c <= '\r');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool is_control(char32_t c) {
  if (c < 128) return (c < 32 && c != '\t' && c != '\n' && c != '\r') || c == 127;
  const int8_t type = u_charType(static_cast<UChar32>(c));
  const bool other = type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_PRIVATE_USE_CHAR || type == U_SURROGATE;
  return other && assigned_by_unicode_8(c);
}

bool is_punctuation(char32_t c) {
  if (c < 128) return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
  if (was_punctuation_in_8(c)) return true;
  const uint32_t mask = U_GC_PC_MASK | U_GC_PD_MASK | U_GC_PS_MASK | U_GC_PE_MASK | U_GC_PI_MASK | U_GC_PF_MASK | U_GC_PO_MASK;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & mask) != 0 && assigned_by_unicode_8(c);
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t c) {
  if (c < 128) return false;
  if (was_nonspacing_mark_in_8(c)) return true;
  if (was_not_nonspacing_mark_in_8(c)) return false;
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK && assigned_by_unicode_8(c);
}

void append_lowercase(char32_t c, std::string& out) {
  if (c < 128) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    return;
  }
  if (c == 0x130) {  // the one unconditional multi-character lowercase: İ -> i + combining dot above
    out += 'i';
    append_utf8(0x307, out);
    return;
  }
  const char32_t newer = unicode_16_lowercase(c);
  append_utf8(newer != c ? newer : static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))), out);
}

namespace {
// NFD restricted to Unicode 8.0 characters: the others pass through untouched, as in `tokenizers`.
const icu::Normalizer2& nfd_of_unicode_8() {
  static const icu::Normalizer2* const normalizer = [] {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
    QKV_CHECK(U_SUCCESS(err), "ICU: no NFD data (" << u_errorName(err) << ")");
    static icu::UnicodeSet unicode_8(icu::UnicodeString(u"[:Age=8.0:]"), err);
    QKV_CHECK(U_SUCCESS(err), "ICU: cannot build the Unicode 8.0 set (" << u_errorName(err) << ")");
    unicode_8.freeze();
    return new icu::FilteredNormalizer2(*nfd, unicode_8);
  }();
  return *normalizer;
}
}  // namespace

void append_nfd(std::string_view in, std::string& out) {
  UErrorCode err = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfd_of_unicode_8().normalizeUTF8(0, icu::StringPiece(in.data(), static_cast<int32_t>(in.size())), sink, nullptr, err);
  QKV_CHECK(U_SUCCESS(err), "ICU: NFD failed (" << u_errorName(err) << ")");
}

char32_t next_char(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int32_t at = static_cast<int32_t>(i);
  UChar32 cp;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), at, static_cast<int32_t>(s.size()), cp);
  i = static_cast<size_t>(at);
  return cp < 0 ? 0xFFFD : static_cast<char32_t>(cp);
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace qkv::text::bert
