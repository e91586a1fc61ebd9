#include "qkv/text/spm_normalizer_check.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "qkv/core/error.h"

namespace qkv::text {
namespace {

// Minimal protobuf wire-format reader: just enough to find length-delimited fields by number.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ >= bytes_.size(); }
  std::optional<uint64_t> varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && pos_ < bytes_.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    return std::nullopt;
  }
  // The next field: its number and, for length-delimited fields, the payload. nullopt at a
  // malformed field (SentencePiece's parser will refuse the model).
  struct Field {
    uint64_t number;
    std::optional<std::string_view> payload;
  };
  std::optional<Field> next() {
    const auto key = varint();
    if (!key) return std::nullopt;
    Field f{*key >> 3, std::nullopt};
    switch (*key & 7) {
      case 0:
        if (!varint()) return std::nullopt;
        return f;
      case 1:
        return skip(8) ? std::optional<Field>(f) : std::nullopt;
      case 5:
        return skip(4) ? std::optional<Field>(f) : std::nullopt;
      case 2: {
        const auto len = varint();
        if (!len || *len > bytes_.size() - pos_) return std::nullopt;
        f.payload = bytes_.substr(pos_, *len);
        pos_ += *len;
        return f;
      }
      default:
        return std::nullopt;
    }
  }

 private:
  bool skip(size_t n) {
    if (n > bytes_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
};

uint32_t unit_at(std::string_view trie, size_t i) {
  uint32_t u;
  std::memcpy(&u, trie.data() + 4 * i, 4);
  return u;  // little-endian hosts only, as libsentencepiece itself
}

// darts-clone's unit layout: bit 31 marks a value unit (value = low 31 bits); otherwise bits 0-7
// are the label, bit 8 says the node has a value child, and the child offset is bits 10-31,
// shifted left by 8 when bit 9 is set. Children of node i live at i ^ offset ^ c (c a byte).
void check_charsmap(std::string_view map, const std::string& where, const char* which) {
  if (map.empty()) return;  // no map: SentencePiece does not normalize
  QKV_CHECK(map.size() >= 4, where << ": " << which << " map of " << map.size() << " bytes is too short");
  uint32_t trie_size;
  std::memcpy(&trie_size, map.data(), 4);
  QKV_CHECK(trie_size % 4 == 0 && trie_size < map.size() - 4,
            where << ": " << which << " map: trie size " << trie_size << " does not fit its " << map.size() << " bytes");
  const std::string_view trie = map.substr(4, trie_size), blob = map.substr(4 + trie_size);
  QKV_CHECK(!blob.empty() && blob.back() == '\0', where << ": " << which << " map: replacement strings are not NUL-terminated");
  const size_t units = trie.size() / 4;
  for (size_t i = 0; i < units; ++i) {
    const uint32_t u = unit_at(trie, i);
    if (u & (1u << 31)) {
      QKV_CHECK((u & 0x7FFFFFFFu) < blob.size(), where << ": " << which << " map: trie value " << (u & 0x7FFFFFFFu)
                                                       << " at unit " << i << " points past the " << blob.size()
                                                       << "-byte string table");
      continue;
    }
    const size_t offset = static_cast<size_t>(u >> 10) << ((u & (1u << 9)) >> 6);
    if (offset == 0 && (u & 0x1FF) == 0) continue;  // an unused unit
    QKV_CHECK(((i ^ offset) | 0xFF) < units, where << ": " << which << " map: trie unit " << i
                                                   << " points outside the " << units << "-unit array");
  }
}

std::optional<std::string_view> charsmap_of(std::string_view spec) {
  WireReader r(spec);
  while (!r.done()) {
    const auto f = r.next();
    if (!f) return std::nullopt;
    if (f->number == 2 && f->payload) return f->payload;
  }
  return std::nullopt;
}

}  // namespace

void check_normalizer_maps(const std::string& serialized, const std::string& where) {
  WireReader r(serialized);
  while (!r.done()) {
    const auto f = r.next();
    if (!f) return;
    if (!f->payload || (f->number != 3 && f->number != 5)) continue;
    if (const auto map = charsmap_of(*f->payload))
      check_charsmap(*map, where, f->number == 3 ? "normalizer" : "denormalizer");
  }
}

}  // namespace qkv::text
