// sacreBLEU's default BLEU tokenizer, "13a" (mteval-v13a.pl), ported from sacrebleu 2.x
// tokenizers/tokenizer_13a.py + tokenizer_re.py, and the bits of Python text semantics both BLEU and
// chrF depend on: str.split()/str.rstrip() whitespace (Unicode, not just ASCII), strict UTF-8, and
// the way sacreBLEU's command line splits a file into lines.
//
// All functions take and return UTF-8. The 13a regexes only name ASCII characters, so they are
// applied to the bytes directly: a multi-byte character never contains an ASCII byte, and every
// match/replacement falls on the same characters as Python's re.sub over code points.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::eval {

// Python's str.isspace() for one code point: \t \n \v \f \r, U+001C..U+001F, space, U+0085, U+00A0,
// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. This is what str.split() with no
// argument and str.rstrip() strip.
bool is_python_space(char32_t c);

// The code point starting at s[i] and its length in bytes (*len >= 1). Expects valid UTF-8; on an
// invalid byte returns that byte's value with *len = 1 (never reads past s).
char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* len);

// Offset of the first byte where `s` stops being valid UTF-8 as Python's strict 'utf-8' codec
// decodes it (no overlong forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF, no truncated
// or stray continuation bytes), or std::string_view::npos when all of `s` is valid.
std::size_t find_invalid_utf8(std::string_view s);

// str.split() with no argument: the non-empty runs between Python whitespace, as views into `s`.
std::vector<std::string_view> python_split(std::string_view s);
// str.rstrip() with no argument.
std::string_view python_rstrip(std::string_view s);
// The code points of `s` (UTF-8) with all Python whitespace removed: ''.join(s.split()).
std::u32string code_points_without_space(std::string_view s);

// What sacreBLEU's BLEU does to a segment before counting n-grams with the default tokenizer:
// Tokenizer13a()(line.rstrip()). Tokens in the result are separated by exactly one ASCII space.
std::string tokenize_13a(std::string_view line);

// Splits a text into lines as sacreBLEU's command line reads a file (open(..., newline="\n") then
// line.rstrip()): lines end at '\n' only, a final '\n' does not start another line, trailing Python
// whitespace of every line (a '\r' included) is dropped. Throws qkv::Error
// "NAME:LINE: invalid UTF-8 (byte 0xXX at column C)" when the text is not valid UTF-8.
std::vector<std::string> split_text_lines(std::string_view text, const std::string& name);

// split_text_lines() of a file's contents; throws qkv::Error naming `path` when it cannot be read.
std::vector<std::string> read_text_lines(const std::string& path);

}  // namespace qkv::eval
