// The character classes of BERT's normalizer and pre-tokenizer, as the `tokenizers` package (0.21)
// sees them. It mixes Unicode versions: categories (control, punctuation, nonspacing mark) come from
// the `unicode_categories` crate, whose tables are Unicode 8.0; NFD from a crate with data older than
// Unicode 13; whitespace and lowercasing from Rust's standard library (Unicode 16). qkv answers
// from ICU (Unicode 15 on Debian 12) limited to characters assigned by Unicode 8.0, plus the few
// characters whose category changed since and the lowercase pairs Unicode 16 added. A reference
// test checks every code point against `tokenizers` (tests/python/make_wordpiece_refs.py).
#pragma once
#include <string>
#include <string_view>

namespace qkv::text::bert {

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t c);
// What clean_text drops besides U+0000 and U+FFFD: categories Cc, Cf, Co, Cs (as of Unicode 8.0),
// except \t, \n and \r, which count as whitespace.
bool is_control(char32_t c);
// ASCII punctuation (which includes $ + < = > ^ ` | ~) or a Unicode P* category (as of 8.0).
bool is_punctuation(char32_t c);
// The CJK ideograph ranges of BertNormalizer's handle_chinese_chars.
bool is_chinese_char(char32_t c);
// Category Mn as of Unicode 8.0: what strip_accents removes after NFD.
bool is_nonspacing_mark(char32_t c);
// Appends Rust's char::to_lowercase(c) (full mapping, no context: İ becomes "i̇", Σ always σ).
void append_lowercase(char32_t c, std::string& out);
// NFD of UTF-8 text, leaving characters newer than Unicode 8.0 as they are. `in` must be valid UTF-8.
void append_nfd(std::string_view in, std::string& out);

// The code point at s[i], advancing i past it; an ill-formed sequence reads as U+FFFD.
char32_t next_char(std::string_view s, size_t& i);
void append_utf8(char32_t c, std::string& out);

}  // namespace qkv::text::bert
