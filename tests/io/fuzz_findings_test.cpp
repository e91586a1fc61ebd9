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
#include "qkv/io/checkpoint_dir.h"
#include "qkv/io/npy.h"
#include "qkv/io/safetensors.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/train_state.h"

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

// A version 1.0 .npy file with `header` (padded as NumPy pads it) and `data`.
std::string npy_file(std::string header, const std::string& data) {
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

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

// fuzz_npy: a dimension of 20 digits made std::stoll throw std::out_of_range, which escaped
// read_npy (the fuzzer's input, with its 0x1b byte in the padding).
TEST_F(FuzzFindingsTest, NpyDimensionBeyondInt64) {
  const std::string path =
      write("long_dimension.npy",
            npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (10995116271099511627776776, 0), }\x1b", ""));
  const std::string message = qkv_error_of([&] { qkv::io::read_npy(path); });
  EXPECT_NE(message.find(path + ": not a valid .npy header (a dimension is 2^40 or more)"), std::string::npos)
      << message;
}

// fuzz_npy: each dimension was below 2^40, but their product overflowed int64 (UBSan), in the
// reader and again in Dims::numel, even for an array with a zero dimension and no data.
TEST_F(FuzzFindingsTest, NpyElementCountOverflow) {
  const std::string path = write(
      "overflow.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627775, 1099511627775, 0), }", ""));
  const std::string message = qkv_error_of([&] { qkv::io::read_npy(path); });
  EXPECT_NE(message.find(path + ": shape (1099511627775, 1099511627775, 0) has more than 2^40 elements"),
            std::string::npos)
      << message;
}

// Review of the above: the shape was found with std::regex, whose matcher recurses once per
// character; a 63 KB header (the format allows 65,535 bytes, past the fuzzer's 4 KB inputs)
// overflowed the stack: a segfault in the release build too (g++ 12 -O2, 8 MB stack). The header
// is now parsed by hand.
TEST_F(FuzzFindingsTest, NpyLongHeader) {
  std::string shape = "(";
  for (int i = 0; i < 21000; ++i) shape += "1, ";
  const std::string path =
      write("long_header.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "), }", "abcd"));
  const std::string message = qkv_error_of([&] { qkv::io::read_npy(path); });
  EXPECT_NE(message.find(path + ": not a valid .npy header (more than 6 dimensions)"), std::string::npos)
      << message.substr(0, 300);
}

// Review of the above: the header was searched for the text "'descr': '<f4'" anywhere, so a
// float64 file whose header held that text in another value was read as float32.
TEST_F(FuzzFindingsTest, NpyDescrOnlyFromItsKey) {
  const std::string path = write("float64.npy", npy_file("{'descr': '<f8', 'x': \"'descr': '<f4'\", "
                                                         "'fortran_order': False, 'shape': (1,), }",
                                                         std::string(8, '\0')));
  const std::string message = qkv_error_of([&] { qkv::io::read_npy(path); });
  EXPECT_NE(message.find(path + ": not a valid .npy header (key 'x' is unknown or given twice)"), std::string::npos)
      << message;
  const std::string f8 = write("f8.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
                                                  std::string(8, '\0')));
  EXPECT_NE(qkv_error_of([&] { qkv::io::read_npy(f8); }).find("expected a little-endian float32 array"), std::string::npos);
}

// fuzz_train_state: numbers were converted with nlohmann's get<T>, so 1e300 for an integer field
// was undefined behaviour (UBSan: outside the range of long), a fraction was truncated, a negative
// seed wrapped to 2^64 - 1, 1e39 became an infinite label smoothing (written back as null, so the
// resumed run's own checkpoint could not be read), and format_version 4294967297 wrapped to 1 in
// an int. Each is now refused naming the file and the field.
TEST_F(FuzzFindingsTest, TrainStateNumbersReadExactly) {
  const std::string legacy = R"({"generator_offset": 9, "task": "copy", "batch": 16, "len": 8, "data_seed": 3, "lr": 0.001, )";
  const std::string hyper = R"("hyper": {"schedule": "constant", "lr": 1e-4, "d_model": 8, "clip_norm": 0,
      "micro_batch": 0, "beta1": 0.9, "beta2": 0.98, "eps": 1e-9, )";
  const std::string current = R"({"format": "qkv-train-state", "kind": "synthetic", "step": 5, "generator": {"seed": 1, "offset": 2},
      "data": {}, "best": 0, "bad_validations": 0, "elapsed_seconds": 1, )";
  const struct {
    const char* name;
    std::string text, expected;
  } cases[] = {
      {"step_1e300", legacy + R"("step": 1e300, "generator_seed": 7})", "\"step\" must be a 64-bit integer, got 1e+300"},
      {"step_fraction", legacy + R"("step": 2.5, "generator_seed": 7})", "\"step\" must be a 64-bit integer, got 2.5"},
      {"seed_negative", legacy + R"("step": 2, "generator_seed": -1})",
       "\"generator_seed\" must be an unsigned 64-bit integer, got -1"},
      {"warmup_1e300", current + R"("format_version": 2, )" + hyper + R"("label_smoothing": 0, "warmup": 1e300}})",
       "\"warmup\" must be a 64-bit integer, got 1e+300"},
      {"label_smoothing_1e39", current + R"("format_version": 2, )" + hyper + R"("label_smoothing": 1e39, "warmup": 10}})",
       "\"label_smoothing\" is out of a float's range, got 1e+39"},
      {"version_wraps_to_1", current + R"("format_version": 4294967297, )" + hyper + R"("label_smoothing": 0, "warmup": 10}})",
       "format_version 4294967297 is newer than this qkv reads (2)"},
  };
  for (const auto& c : cases) {
    const std::string path = write(std::string(c.name) + ".json", c.text);
    const std::string message = qkv_error_of([&] { qkv::train::read_train_state(path); });
    EXPECT_NE(message.find(path + ": "), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
  }
  // The same file with sound numbers reads (so the cases above fail for their number alone).
  const std::string sound = write("sound.json", current + R"("format_version": 2, )" + hyper + R"("label_smoothing": 0.1, "warmup": 10}})");
  EXPECT_EQ(qkv::train::read_train_state(sound).hyper.schedule.warmup, 10);
  EXPECT_EQ(qkv::train::read_train_state(write("legacy.json", legacy + R"("step": 2.0, "generator_seed": 7})")).step, 2);
}

// fuzz_manifest: the manifest's format was never checked (the fuzzer's "format": "qkv-ckchepoint"
// verified), "step": 1e300 and "bytes": 1e300 were undefined behaviour (UBSan), a negative step
// or "files": [] were accepted, and a listed name such as "/x" or "../x" made it check, and report
// the CRC-32 of, a file outside the checkpoint directory.
TEST_F(FuzzFindingsTest, ManifestReadStrictly) {
  const std::string ok = R"({"format": "qkv-checkpoint", "format_version": 1, )";
  const fs::path checkpoint = dir_ / "ckpt";
  fs::create_directories(checkpoint);
  write("outside.bin", "abc");  // beside the checkpoint directory; CRC-32 352441c2
  const struct {
    const char* name;
    std::string text, expected;
  } cases[] = {
      {"other_format", R"({"format": "qkv-ckchepoint", "format_version": 1, "files": {}})",
       "not a qkv checkpoint manifest"},
      {"newer_version", R"({"format": "qkv-checkpoint", "format_version": 2, "files": {}})", "format_version 2 is not 1"},
      {"step_1e300", ok + R"("step": 1e300, "files": {}})", "\"step\" must be a non-negative integer, got 1e+300"},
      {"step_negative", ok + R"("step": -3, "files": {}})", "\"step\" must be a non-negative integer, got -3"},
      {"files_array", ok + R"("files": []})", "\"files\" must be an object"},
      {"bytes_1e300", ok + R"("files": {"outside.bin": {"bytes": 1e300, "crc32": "352441c2"}}})",
       "\"bytes\" of outside.bin must be a non-negative integer"},
      {"parent", ok + R"("files": {"../outside.bin": {"bytes": 3, "crc32": "352441c2"}}})",
       "lists \"../outside.bin\", which is not a file name inside the checkpoint directory"},
      {"absolute", ok + R"("files": {"/etc/hostname": {"bytes": 3, "crc32": "352441c2"}}})",
       "lists \"/etc/hostname\", which is not a file name inside the checkpoint directory"},
  };
  for (const auto& c : cases) {
    if (std::string(c.name) == "bytes_1e300") write("ckpt/outside.bin", "abc");
    const std::string path = write("ckpt/manifest.json", c.text);
    const std::string message = qkv_error_of([&] { qkv::io::verify_manifest(checkpoint.string()); });
    EXPECT_NE(message.find(path + ": "), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
  }
  // A sound manifest of the same file verifies.
  write("ckpt/manifest.json", ok + R"("step": 4, "files": {"outside.bin": {"bytes": 3, "crc32": "352441c2"}}})");
  EXPECT_EQ(qkv::io::verify_manifest(checkpoint.string()).step, 4);
}

}  // namespace
