// GPT-2's byte-to-unicode map, the alphabet of byte-level BPE: every byte is one visible Unicode
// character, so BPE works on text that has no spaces or control characters. The printable bytes
// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the other 68 bytes, in order,
// for U+0100..U+0143 (so ' ' is "Ġ" U+0120 and '\n' is "Ċ" U+010A).
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace qkv::text {

// The UTF-8 of the character that stands for each byte.
const std::array<std::string, 256>& byte_level_symbols();

// The byte that code point `c` stands for, or -1 when `c` is not in the alphabet.
int byte_level_byte(uint32_t c);

}  // namespace qkv::text
