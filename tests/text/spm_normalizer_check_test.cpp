// The guard in front of libsentencepiece's normalizer refuses damaged character maps (which made
// encoding read outside the model: a finding of fuzz_sentencepiece_load) and lets sound ones pass.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "qkv/core/error.h"
#include "qkv/text/spm_normalizer_check.h"
#include "error_message.h"

namespace qkv::text {
namespace {

std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string length_delimited(int field, const std::string& payload) {
  return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(payload.size()) + payload;
}
std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// A ModelProto holding only normalizer_spec { name: "x", precompiled_charsmap: map }.
std::string model_with_map(const std::string& map) {
  return length_delimited(3, length_delimited(1, "x") + length_delimited(2, map));
}

std::string error_of(const std::string& model) {
  return test_support::error_message_of([&] { check_normalizer_maps(model, "m.model"); });
}

TEST(SpmNormalizerCheck, RefusesDamagedMapsAndPassesSoundOnes) {
  const std::string blob("ab\0", 3);
  // One value unit (bit 31) pointing at offset 1 of a 3-byte table: sound.
  EXPECT_EQ(error_of(model_with_map(u32(4) + u32(0x80000001u) + blob)), "");
  EXPECT_NE(error_of(model_with_map(u32(4) + u32(0x80000000u | 70000u) + blob)).find("trie value 70000"),
            std::string::npos);
  EXPECT_NE(error_of(model_with_map(u32(6) + u32(0) + blob)).find("does not fit"), std::string::npos);
  EXPECT_NE(error_of(model_with_map(u32(0xFFFFFFF0u) + blob)).find("does not fit"), std::string::npos);
  EXPECT_NE(error_of(model_with_map(u32(4) + u32(0) + std::string("ab"))).find("not NUL-terminated"),
            std::string::npos);
  // A node whose children would lie outside the one-unit array.
  EXPECT_NE(error_of(model_with_map(u32(4) + u32((5u << 10) | 0x41u) + blob)).find("outside the 1-unit array"),
            std::string::npos);
  EXPECT_EQ(error_of(model_with_map("")), "");                    // no map: no normalization
  EXPECT_EQ(error_of(std::string("\xff\xff\xff", 3)), "");         // not protobuf: left to SentencePiece
}

}  // namespace
}  // namespace qkv::text
