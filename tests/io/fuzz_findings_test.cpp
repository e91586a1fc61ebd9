// Regression tests for what the libFuzzer targets (fuzz/, fuzz/README.md) found: each input here
// made a reader crash or let an exception other than qkv::Error escape before its fix. Every one
// must now be refused with a qkv::Error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/text/sentencepiece.h"

namespace {

namespace fs = std::filesystem;

std::string le_u64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return bytes;
}

// The message of the qkv::Error that `f` throws; fails the test if it throws anything else or
// nothing.
std::string qkv_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a qkv::Error";
  return "";
}

class FuzzFindingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("qkv_fuzz_findings_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    return path;
  }

  fs::path dir_;
};

// fuzz_safetensors: nlohmann throws out_of_range (406), not parse_error, for a number that
// overflows a double; it escaped the reader as a foreign exception type.
TEST_F(FuzzFindingsTest, SafetensorsHeaderNumberOverflow) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,1e999]}})";
  const std::string path = write("overflow.safetensors", le_u64(header.size()) + header + "abcd");
  const std::string message = qkv_error_of([&] { qkv::io::read_safetensors(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
}

// fuzz_sentencepiece_load: a model whose second piece starts with a NUL byte. SentencePiece's
// darts_clone trie takes it as a C string, an empty key, and throws Darts::Details::Exception
// ("zero-length key") out of LoadFromSerializedProto, which escaped the loader.
TEST_F(FuzzFindingsTest, SentencePieceModelWithNulPiece) {
  // ModelProto{pieces: [{piece: "<unk>", type: UNKNOWN}, {piece: "\0a", type: NORMAL}]}
  const std::string model("\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02"
                          "\x0a\x0b\x0a\x02\x00" "a\x15\x00\x00\x00\x00\x18\x01",
                          29);
  const std::string path = write("nul_piece.model", model);
  const std::string message = qkv_error_of([&] { qkv::text::SentencePiece loaded(path); });
  EXPECT_NE(message.find(path + ": not a valid SentencePiece model"), std::string::npos) << message;
  const std::string from_bytes =
      qkv_error_of([&] { qkv::text::SentencePiece::from_bytes(model, "bytes.model"); });
  EXPECT_NE(from_bytes.find("bytes.model: not a valid SentencePiece model"), std::string::npos)
      << from_bytes;
}

}  // namespace
