#include "qkv/text/byte_level_alphabet.h"

namespace qkv::text {
namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

std::string utf8(uint32_t c) {  // c < 0x800 here
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// code point -> byte for U+0000..U+0143, -1 elsewhere.
struct Alphabet {
  std::array<std::string, 256> symbols;
  std::array<int, 0x144> byte_of;
  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = stands_for_itself(b) ? static_cast<uint32_t>(b) : next++;
      symbols[b] = utf8(c);
      byte_of[c] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::array<std::string, 256>& byte_level_symbols() { return alphabet().symbols; }

int byte_level_byte(uint32_t c) { return c < alphabet().byte_of.size() ? alphabet().byte_of[c] : -1; }

}  // namespace qkv::text
