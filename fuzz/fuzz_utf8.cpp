// Fuzz target: UTF-8 checks (qkv/text/utf8.h, and the Python-semantics helpers of
// qkv/eval/tokenizer_13a.h that BLEU/chrF use).
// Input: any bytes.
// Invariants: text::valid_utf8 and eval::find_invalid_utf8 agree with a reference decoder written
// from the Unicode definition (scalar values encoded in the shortest form) on validity and on the
// offset of the first bad byte; the line reader returns exactly the lines of the input; on valid
// text, decode_utf8 walks the string code point by code point and re-encoding gives it back.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/eval/tokenizer_13a.h"
#include "qkv/text/utf8.h"

namespace {

std::string encode_utf8(char32_t c) {
  std::string out;
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
  return out;
}

// Reference: at each position, a sequence is well-formed iff it is the encoding of some Unicode
// scalar value (not a surrogate, at most U+10FFFF) in its shortest form. Tries every length.
size_t reference_first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t matched = 0;
    for (size_t len = 1; len <= 4 && matched == 0 && i + len <= s.size(); ++len) {
      const auto lead = static_cast<unsigned char>(s[i]);
      const unsigned lead_bits[5] = {0, 7, 5, 4, 3};
      char32_t c = lead & ((1u << lead_bits[len]) - 1);
      for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      const bool scalar = c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
      if (scalar && encode_utf8(c) == s.substr(i, len)) matched = len;
    }
    if (matched == 0) return i;
    i += matched;
  }
  return std::string_view::npos;
}

void check_validators_agree(std::string_view text) {
  const size_t expected = reference_first_invalid(text);
  size_t offset = 0;
  const bool valid = qkv::text::valid_utf8(text, &offset);
  QKV_FUZZ_REQUIRE(valid == (expected == std::string_view::npos));
  if (!valid) QKV_FUZZ_REQUIRE(offset == expected);
  QKV_FUZZ_REQUIRE(qkv::eval::find_invalid_utf8(text) == expected);
}

void check_decoding_round_trip(std::string_view text) {
  std::string rebuilt;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const char32_t c = qkv::eval::decode_utf8(text, i, &len);
    QKV_FUZZ_REQUIRE(len >= 1 && i + len <= text.size());
    rebuilt += encode_utf8(c);
    i += len;
  }
  QKV_FUZZ_REQUIRE(rebuilt == text);
  const std::u32string no_space = qkv::eval::code_points_without_space(text);
  for (char32_t c : no_space) QKV_FUZZ_REQUIRE(!qkv::eval::is_python_space(c));
  for (std::string_view token : qkv::eval::python_split(text)) QKV_FUZZ_REQUIRE(!token.empty());
}

// The file reader must give back the input's lines: split at '\n' (no empty line after a final
// '\n'), one '\r' dropped at each line's end and a BOM at the start of the first. It refuses
// exactly the invalid texts ('\n', '\r' and a BOM never change whether the rest is valid).
void check_line_reader(std::string_view text) {
  static const std::string path = qkv::fuzz::scratch_path("lines.txt");
  qkv::fuzz::write_file(path, text);
  std::vector<std::string> lines;
  try {
    lines = qkv::text::read_text_lines(path);
  } catch (const qkv::Error&) {
    QKV_FUZZ_REQUIRE(!qkv::text::valid_utf8(text));
    return;
  }
  QKV_FUZZ_REQUIRE(qkv::text::valid_utf8(text));
  std::vector<std::string> expected;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t end = rest.find('\n');
    std::string line(rest.substr(0, end));
    if (expected.empty() && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    expected.push_back(line);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  QKV_FUZZ_REQUIRE(lines == expected);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = qkv::fuzz::as_text(data, size);
  check_validators_agree(text);
  if (qkv::text::valid_utf8(text)) check_decoding_round_trip(text);
  check_line_reader(text);
  return 0;
}
