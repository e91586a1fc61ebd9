// Tests for qkv/io/safetensors.h: round trips, on-disk layout guarantees, and
// one test per validation error (each checks the message names the file, the
// tensor and the offset where that applies). The interop test reads a file
// written by tests/python/safetensors_io.py ($QKV_REF_DIR/py_selftest.safetensors).
#include "model/ref_dir.h"
#include "qkv/io/safetensors.h"

#include "qkv/core/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace qkv::io {
namespace {

namespace fs = std::filesystem;

template <typename T>
StTensor make_tensor(const std::string& name, StDtype dtype, std::vector<int64_t> shape,
                     const std::vector<T>& values) {
  StTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

template <typename T>
std::vector<T> values_of(const StTensor& t) {
  std::vector<T> values(t.bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
  return values;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_whole_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string le_u64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return bytes;
}

uint64_t header_length_of(const std::string& contents) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(contents[i]);
  return value;
}

// Message of the SafetensorsError thrown by reading `path` ("" if none was thrown).
std::string read_error(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected SafetensorsError reading " << path;
  return "";
}

std::string write_error(const std::string& path, const StFile& file) {
  try {
    write_safetensors(path, file);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected SafetensorsError writing " << path;
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string> pieces) {
  for (const std::string& piece : pieces) {
    EXPECT_NE(message.find(piece), std::string::npos)
        << "message lacks \"" << piece << "\":\n  " << message;
  }
}

// Each test gets its own directory (pid + test name) so parallel runs don't collide.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("qkv_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& file_name) const { return (dir_ / file_name).string(); }

  // Writes a hand-made file: correct length prefix + header text + data bytes.
  std::string write_raw(const std::string& file_name, const std::string& header,
                        const std::string& data = "") const {
    const std::string p = path(file_name);
    write_whole_file(p, le_u64(header.size()) + header + data);
    return p;
  }

  fs::path dir_;
};

StFile sample_file() {
  StFile file;
  file.tensors.push_back(make_tensor<float>("w", StDtype::F32, {2, 3}, {1, 2, 3, 4, 5, 6.5f}));
  file.tensors.push_back(make_tensor<int32_t>("ids", StDtype::I32, {4}, {7, -1, 0, 2147483647}));
  file.tensors.push_back(make_tensor<double>("scalar", StDtype::F64, {}, {3.25}));
  file.tensors.push_back(make_tensor<float>("empty", StDtype::F32, {0, 5}, {}));
  file.tensors.push_back(make_tensor<int64_t>("big", StDtype::I64, {2}, {int64_t{1} << 40, -5}));
  return file;
}

// ------------------------------------------------------------ round trips ---

TEST_F(SafetensorsTest, RoundTripsSeveralTensors) {
  const StFile original = sample_file();
  write_safetensors(path("m.safetensors"), original);
  const StFile loaded = read_safetensors(path("m.safetensors"));

  ASSERT_EQ(loaded.tensors.size(), original.tensors.size());
  for (const StTensor& want : original.tensors) {
    const StTensor* got = loaded.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->bytes, want.bytes) << want.name;
  }
  EXPECT_EQ(values_of<float>(*loaded.find("w")), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  EXPECT_EQ(values_of<int32_t>(*loaded.find("ids")), (std::vector<int32_t>{7, -1, 0, 2147483647}));
  EXPECT_TRUE(loaded.find("scalar")->shape.empty());
  EXPECT_EQ(values_of<double>(*loaded.find("scalar")), std::vector<double>{3.25});
  EXPECT_TRUE(loaded.find("empty")->bytes.empty());
  EXPECT_EQ(values_of<int64_t>(*loaded.find("big")), (std::vector<int64_t>{int64_t{1} << 40, -5}));
  EXPECT_TRUE(loaded.metadata.empty());
}

TEST_F(SafetensorsTest, RoundTripsMetadata) {
  StFile original = sample_file();
  original.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode \"quoted\""}};
  write_safetensors(path("m.safetensors"), original);
  EXPECT_EQ(read_safetensors(path("m.safetensors")).metadata, original.metadata);
}

TEST_F(SafetensorsTest, RoundTripsFileWithNoTensors) {
  write_safetensors(path("empty.safetensors"), StFile{});
  const StFile loaded = read_safetensors(path("empty.safetensors"));
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_EQ(read_whole_file(path("empty.safetensors")), le_u64(8) + "{}      ");
}

TEST_F(SafetensorsTest, FindReturnsNullptrForUnknownName) {
  write_safetensors(path("m.safetensors"), sample_file());
  EXPECT_EQ(read_safetensors(path("m.safetensors")).find("nope"), nullptr);
}

TEST_F(SafetensorsTest, DtypeHelpers) {
  EXPECT_EQ(st_dtype_size(StDtype::F32), 4u);
  EXPECT_EQ(st_dtype_size(StDtype::I32), 4u);
  EXPECT_EQ(st_dtype_size(StDtype::I64), 8u);
  EXPECT_EQ(st_dtype_size(StDtype::F64), 8u);
  EXPECT_STREQ(st_dtype_name(StDtype::F32), "F32");
  EXPECT_STREQ(st_dtype_name(StDtype::I32), "I32");
  EXPECT_STREQ(st_dtype_name(StDtype::I64), "I64");
  EXPECT_STREQ(st_dtype_name(StDtype::F64), "F64");
}

// ----------------------------------------------------------- file layout ---

TEST_F(SafetensorsTest, DataStartsEightByteAlignedAndHeaderIsSpacePadded) {
  // Names of every length 1..9 shift the unpadded header length through all residues mod 8.
  for (int name_length = 1; name_length <= 9; ++name_length) {
    StFile file;
    file.tensors.push_back(
        make_tensor<float>(std::string(name_length, 'x'), StDtype::F32, {1}, {1.0f}));
    const std::string p = path("aligned.safetensors");
    write_safetensors(p, file);

    const std::string contents = read_whole_file(p);
    const uint64_t header_length = header_length_of(contents);
    EXPECT_EQ((8 + header_length) % 8, 0u) << "name length " << name_length;
    EXPECT_EQ(contents.size(), 8 + header_length + 4);
    const std::string header = contents.substr(8, header_length);
    const size_t close = header.find_last_of('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << header;
    EXPECT_LT(header.size() - close - 1, 8u) << "padding longer than needed: " << header;
  }
}

TEST_F(SafetensorsTest, WritesTensorsSortedByNameWithContiguousData) {
  StFile file;
  file.tensors.push_back(make_tensor<float>("zeta", StDtype::F32, {1}, {3}));
  file.tensors.push_back(make_tensor<double>("alpha", StDtype::F64, {1}, {1}));
  file.tensors.push_back(make_tensor<int32_t>("mid", StDtype::I32, {2}, {2, 2}));
  const std::string p = path("sorted.safetensors");
  write_safetensors(p, file);

  const std::string contents = read_whole_file(p);
  const std::string header = contents.substr(8, header_length_of(contents));
  EXPECT_NE(header.find(R"("alpha":{"dtype":"F64","shape":[1],"data_offsets":[0,8]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("mid":{"dtype":"I32","shape":[2],"data_offsets":[8,16]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("zeta":{"dtype":"F32","shape":[1],"data_offsets":[16,20]})"),
            std::string::npos)
      << header;
  EXPECT_LT(header.find("\"alpha\""), header.find("\"mid\""));
  EXPECT_LT(header.find("\"mid\""), header.find("\"zeta\""));

  const StFile loaded = read_safetensors(p);
  ASSERT_EQ(loaded.tensors.size(), 3u);
  EXPECT_EQ(loaded.tensors[0].name, "alpha");
  EXPECT_EQ(loaded.tensors[1].name, "mid");
  EXPECT_EQ(loaded.tensors[2].name, "zeta");
}

TEST_F(SafetensorsTest, ReadsOffsetsInAnyOrderAndReportsFileOrder) {
  // Header lists "a" first but its data comes second; no padding, unsorted keys.
  const std::string header = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                             R"("__metadata__":{"k":"v"}})";
  const int32_t b_value = 11;
  const int32_t a_value = 22;
  std::string data(8, '\0');
  std::memcpy(data.data(), &b_value, 4);
  std::memcpy(data.data() + 4, &a_value, 4);
  const StFile loaded = read_safetensors(write_raw("unordered.safetensors", header, data));

  ASSERT_EQ(loaded.tensors.size(), 3u);
  // Ascending (begin, end): the empty tensor at [4,4) sorts before "a" at [4,8).
  EXPECT_EQ(loaded.tensors[0].name, "b");
  EXPECT_EQ(loaded.tensors[1].name, "e");
  EXPECT_EQ(loaded.tensors[2].name, "a");
  EXPECT_EQ(values_of<int32_t>(*loaded.find("a")), std::vector<int32_t>{22});
  EXPECT_EQ(values_of<int32_t>(*loaded.find("b")), std::vector<int32_t>{11});
  EXPECT_EQ(loaded.metadata.at("k"), "v");
}

// ---------------------------------------------------------- atomic write ---

TEST_F(SafetensorsTest, OverwritesExistingFileAndLeavesNoTemporary) {
  const std::string p = path("m.safetensors");
  write_whole_file(p, "old contents");
  write_safetensors(p, sample_file());
  EXPECT_EQ(read_safetensors(p).tensors.size(), sample_file().tensors.size());

  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"m.safetensors"});
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryNamesPathAndErrno) {
  const std::string p = path("no_such_dir/m.safetensors");
  expect_contains(write_error(p, sample_file()),
                  {p, ".tmp." + std::to_string(::getpid()), "No such file or directory"});
}

TEST_F(SafetensorsTest, FailedRenameNamesErrnoAndRemovesTemporary) {
  const std::string p = path("target_is_a_directory");
  fs::create_directories(fs::path(p) / "child");  // non-empty dir: rename over it must fail
  expect_contains(write_error(p, sample_file()), {p, "rename", "Is a directory"});
  EXPECT_FALSE(fs::exists(p + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SafetensorsTest, WriteRejectsDuplicateNames) {
  StFile file;
  file.tensors.push_back(make_tensor<float>("dup", StDtype::F32, {1}, {1}));
  file.tensors.push_back(make_tensor<float>("dup", StDtype::F32, {1}, {2}));
  const std::string p = path("m.safetensors");
  expect_contains(write_error(p, file), {p, "duplicate tensor name 'dup'"});
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(SafetensorsTest, WriteRejectsByteSizeMismatch) {
  StFile file;
  file.tensors.push_back(make_tensor<float>("w", StDtype::F32, {2, 3}, {1, 2, 3}));
  const std::string p = path("m.safetensors");
  expect_contains(write_error(p, file), {p, "'w'", "[2,3]", "12 bytes", "expected 24"});
}

TEST_F(SafetensorsTest, WriteRejectsNegativeDim) {
  StFile file;
  file.tensors.push_back(make_tensor<float>("w", StDtype::F32, {-1}, {}));
  const std::string p = path("m.safetensors");
  expect_contains(write_error(p, file), {p, "'w'", "negative dim"});
}

// ----------------------------------------------------------- read errors ---

TEST_F(SafetensorsTest, ErrorMissingFile) {
  const std::string p = path("absent.safetensors");
  expect_contains(read_error(p), {p, "No such file or directory"});
}

TEST_F(SafetensorsTest, ErrorPathIsDirectory) {
  const std::string p = path("a_directory");
  fs::create_directories(p);
  expect_contains(read_error(p), {"'" + p + "': is a directory"});
}

TEST_F(SafetensorsTest, ErrorFileShorterThanLengthPrefix) {
  const std::string p = path("short.safetensors");
  write_whole_file(p, "abcde");
  expect_contains(read_error(p), {p, "5 bytes", "shorter than the 8-byte"});
}

TEST_F(SafetensorsTest, ErrorHeaderLengthLargerThanFile) {
  const std::string p = path("truncated_header.safetensors");
  write_whole_file(p, le_u64(1000) + "{}");
  expect_contains(read_error(p), {p, "header length 1000", "file offset 0", "file size 10"});
}

TEST_F(SafetensorsTest, ErrorHeaderLengthOverLimit) {
  const std::string p = path("huge_header.safetensors");
  write_whole_file(p, le_u64(200'000'000) + "{}");
  expect_contains(read_error(p), {p, "header length 200000000", "100000000-byte limit"});
}

TEST_F(SafetensorsTest, ErrorHeaderNotJson) {
  const std::string p = write_raw("bad_json.safetensors", R"({"a": tru})");
  // nlohmann's own message ("parse error ...") is included verbatim.
  expect_contains(read_error(p), {p, "not valid JSON", "near file offset 17", "parse error"});
}

TEST_F(SafetensorsTest, ErrorHeaderNotObject) {
  const std::string p = write_raw("array.safetensors", "[1,2]");
  expect_contains(read_error(p), {p, "does not start with '{'"});
}

TEST_F(SafetensorsTest, ErrorEntryNotObject) {
  const std::string p = write_raw("entry.safetensors", R"({"w":5})");
  expect_contains(read_error(p), {p, "tensor 'w'", "entry is a JSON number"});
}

TEST_F(SafetensorsTest, ErrorEntryMissingDtype) {
  const std::string p = write_raw(
      "no_dtype.safetensors", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "missing \"dtype\""});
}

TEST_F(SafetensorsTest, ErrorEntryMissingShape) {
  const std::string p =
      write_raw("no_shape.safetensors", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})",
                std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "missing \"shape\""});
}

TEST_F(SafetensorsTest, ErrorEntryMissingDataOffsets) {
  const std::string p = write_raw("no_offsets.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})",
                                  std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "missing \"data_offsets\""});
}

TEST_F(SafetensorsTest, ErrorDtypeWrongType) {
  const std::string p =
      write_raw("dtype_type.safetensors", R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})",
                std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "\"dtype\" is a JSON number"});
}

TEST_F(SafetensorsTest, ErrorShapeWrongType) {
  const std::string p =
      write_raw("shape_type.safetensors",
                R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "\"shape\" is a JSON string"});
}

TEST_F(SafetensorsTest, ErrorShapeNonIntegerDim) {
  const std::string p = write_raw("shape_float.safetensors",
                                  R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
                                  std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "non-integer"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsWrongType) {
  const std::string p =
      write_raw("offsets_type.safetensors",
                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "\"data_offsets\" [0]",
                                  "not an array of two non-negative integers"});
}

TEST_F(SafetensorsTest, ErrorUnknownDtype) {
  const std::string p =
      write_raw("f16.safetensors", R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
                std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "unknown dtype \"F16\""});
}

TEST_F(SafetensorsTest, ErrorNegativeDim) {
  const std::string p =
      write_raw("neg.safetensors", R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})");
  expect_contains(read_error(p), {p, "tensor 'w'", "negative dim", "[2,-1]"});
}

TEST_F(SafetensorsTest, ErrorShapeOverflow) {
  const std::string p =
      write_raw("overflow.safetensors",
                R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})");
  expect_contains(read_error(p), {p, "tensor 'w'", "overflows"});
}

TEST_F(SafetensorsTest, ErrorShapeOverflowHiddenByZeroDim) {
  // Zero bytes, but strides computed from this shape would overflow int64.
  const std::string p = write_raw(
      "zero_overflow.safetensors",
      R"({"w":{"dtype":"F32","shape":[0,3037000500,3037000500],"data_offsets":[0,0]}})");
  expect_contains(read_error(p), {p, "tensor 'w'", "[0,3037000500,3037000500]", "overflows"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsEndBeforeBegin) {
  const std::string p =
      write_raw("reversed.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                std::string(8, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "[8,4]", "end < begin"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsPastEndOfFile) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  const std::string p = write_raw("truncated.safetensors", header, std::string(12, '\0'));
  expect_contains(read_error(p),
                  {p, "tensor 'w' data_offsets [0,24) exceed data size 12 (file truncated?)",
                   "file offset " + std::to_string(8 + header.size())});
}

TEST_F(SafetensorsTest, ErrorByteSizeMismatch) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[4,24]}})";
  const std::string p = write_raw("mismatch.safetensors", header, std::string(24, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "needs 24 bytes", "[4,24)", "span 20 bytes",
                                  "file offset " + std::to_string(8 + header.size() + 4)});
}

TEST_F(SafetensorsTest, ErrorDuplicateNames) {
  const std::string p = write_raw("dup.safetensors",
                                  R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  std::string(8, '\0'));
  expect_contains(read_error(p), {p, "duplicate tensor name 'a'"});
}

TEST_F(SafetensorsTest, ErrorOverlappingOffsets) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  const std::string p = write_raw("overlap.safetensors", header, std::string(24, '\0'));
  expect_contains(read_error(p), {p, "tensor 'b'", "[8,24)", "overlap tensor 'a'", "[0,16)",
                                  "file offset " + std::to_string(8 + header.size() + 8)});
}

TEST_F(SafetensorsTest, ErrorMetadataValueNotString) {
  const std::string p = write_raw("meta.safetensors", R"({"__metadata__":{"step":5}})");
  expect_contains(read_error(p), {p, "__metadata__", "'step'", "expected a string"});
}

// ------------------------------------------- tensors must tile the data ---
// The format requires the tensors, sorted by offset, to cover the data buffer exactly: from 0,
// with no gap and no overlap, to the end of the file. Each case below loaded (with every later
// tensor shifted) before the reader checked this.

// "a" = [0,8) (two F32 1.0, 2.0), "b" = [8,12) (I32 7), header padded with 4 spaces so a
// length prefix one short still leaves valid JSON.
const std::string kTiledHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}}    )";

std::string tiled_data() {
  const float a[2] = {1.0f, 2.0f};
  const int32_t b = 7;
  std::string data(12, '\0');
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 8, &b, 4);
  return data;
}

TEST_F(SafetensorsTest, TiledFileLoads) {
  const StFile file = read_safetensors(write_raw("tiled.safetensors", kTiledHeader, tiled_data()));
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(values_of<float>(*file.find("a")), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(values_of<int32_t>(*file.find("b")), std::vector<int32_t>{7});
}

TEST_F(SafetensorsTest, ErrorHeaderLengthPrefixOneShort) {
  // The last padding space becomes the first data byte: JSON still parses, data shifted by 1.
  const std::string p = path("prefix_minus_one.safetensors");
  write_whole_file(p, le_u64(kTiledHeader.size() - 1) + kTiledHeader + tiled_data());
  const uint64_t data_start = 8 + kTiledHeader.size() - 1;
  expect_contains(read_error(p), {p, "1 trailing bytes from file offset " + std::to_string(data_start + 12),
                                  "the last tensor, 'b'", "belong to no tensor"});
}

TEST_F(SafetensorsTest, ErrorFourBytesInsertedInsideData) {
  std::string data = tiled_data();
  data.insert(4, "XXXX");  // inside "a": "a" reads garbage, "b" reads a's second half
  const std::string p = write_raw("inserted.safetensors", kTiledHeader, data);
  expect_contains(read_error(p), {p, "4 trailing bytes from file offset " +
                                         std::to_string(8 + kTiledHeader.size() + 12)});
}

TEST_F(SafetensorsTest, ErrorTrailingBytesAfterData) {
  const std::string p = write_raw("trailing.safetensors", kTiledHeader, tiled_data() + "junk!");
  expect_contains(read_error(p), {p, "5 trailing bytes from file offset " +
                                         std::to_string(8 + kTiledHeader.size() + 12),
                                  "size " + std::to_string(8 + kTiledHeader.size() + 17)});
}

TEST_F(SafetensorsTest, ErrorHoleBeforeFirstTensor) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[12,16]}})";
  const std::string p = write_raw("hole_first.safetensors", header, "HOLE" + tiled_data());
  expect_contains(read_error(p), {p, "tensor 'a'", "[4,12)", "gap", "[0,4)",
                                  "file offset " + std::to_string(8 + header.size()),
                                  "first tensor must start at 0"});
}

TEST_F(SafetensorsTest, ErrorHoleBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[10,14]}})";
  std::string data = tiled_data();
  data.insert(8, "..");
  const std::string p = write_raw("hole_middle.safetensors", header, data);
  expect_contains(read_error(p), {p, "tensor 'b'", "[10,14)", "gap", "[8,10)",
                                  "file offset " + std::to_string(8 + header.size() + 8),
                                  "previous tensor 'a'"});
}

TEST_F(SafetensorsTest, ErrorOverlappingTensorsSharingARange) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  const std::string p = write_raw("same_range.safetensors", header, std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'b'", "[0,4)", "overlap tensor 'a'",
                                  "file offset " + std::to_string(8 + header.size())});
}

TEST_F(SafetensorsTest, OutOfOrderOffsetsThatTileLoad) {
  // Order in the header is free; only the sorted ranges must tile. Empty tensors on boundaries.
  const std::string header = R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
                             R"("end":{"dtype":"F32","shape":[0,3],"data_offsets":[12,12]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("mid":{"dtype":"F64","shape":[0],"data_offsets":[8,8]},)"
                             R"("start":{"dtype":"I64","shape":[4,0],"data_offsets":[0,0]}})";
  const StFile file = read_safetensors(write_raw("shuffled.safetensors", header, tiled_data()));
  std::vector<std::string> names;
  for (const StTensor& t : file.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"start", "a", "mid", "b", "end"}));
  EXPECT_EQ(values_of<float>(*file.find("a")), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(values_of<int32_t>(*file.find("b")), std::vector<int32_t>{7});
  EXPECT_TRUE(file.find("mid")->bytes.empty());
  EXPECT_EQ(file.find("start")->shape, (std::vector<int64_t>{4, 0}));
}

TEST_F(SafetensorsTest, OnlyEmptyTensorsAndEmptyDataLoad) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("y":{"dtype":"I32","shape":[3,0],"data_offsets":[0,0]}})";
  const StFile file = read_safetensors(write_raw("empties.safetensors", header));
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_TRUE(file.find("x")->bytes.empty());
  EXPECT_TRUE(file.find("y")->bytes.empty());
}

TEST_F(SafetensorsTest, ErrorEmptyTensorInsideAnotherTensor) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  const std::string p = write_raw("empty_inside.safetensors", header, tiled_data());
  expect_contains(read_error(p), {p, "tensor 'e'", "[4,4)", "overlap tensor 'a'", "[0,8)",
                                  "file offset " + std::to_string(8 + header.size() + 4)});
}

TEST_F(SafetensorsTest, ErrorEmptyTensorInAGap) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[6,6]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  const std::string p = write_raw("empty_gap.safetensors", header, std::string(12, '\0'));
  expect_contains(read_error(p), {p, "tensor 'e'", "[6,6)", "gap", "[4,6)", "previous tensor 'a'"});
}

TEST_F(SafetensorsTest, ErrorDataWithoutTensors) {
  const std::string p = write_raw("no_tensors.safetensors", "{}", "abcd");
  expect_contains(read_error(p), {p, "4 trailing bytes from file offset 10", "lists no tensor"});
}

TEST_F(SafetensorsTest, ErrorHeaderNotStartingWithBrace) {
  const std::string p = write_raw("leading_space.safetensors", " {}");
  expect_contains(read_error(p), {p, "does not start with '{'", "file offset 8"});
}

TEST_F(SafetensorsTest, ErrorHeaderPaddedWithNewline) {
  const std::string p = write_raw("newline_pad.safetensors", "{}  \n ");
  expect_contains(read_error(p), {p, "other than a space", "file offset 12"});
}

TEST_F(SafetensorsTest, ErrorDuplicateKeyInsideEntry) {
  const std::string p = write_raw(
      "dup_field.safetensors",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"data_offsets":[4,8]}})",
      std::string(8, '\0'));
  expect_contains(read_error(p), {p, "duplicate key \"data_offsets\"", "entry 'w'"});
}

TEST_F(SafetensorsTest, ErrorDuplicateMetadataKey) {
  const std::string p =
      write_raw("dup_meta.safetensors", R"({"__metadata__":{"k":"1","k":"2"}})");
  expect_contains(read_error(p), {p, "duplicate key \"k\"", "entry '__metadata__'"});
}

TEST_F(SafetensorsTest, ErrorOffsetsBeyondFileSize) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[4611686018427387903],"data_offsets":[0,18446744073709551612]}})";
  const std::string p = write_raw("huge_offsets.safetensors", header, std::string(4, '\0'));
  expect_contains(read_error(p), {p, "tensor 'w'", "exceed data size 4"});
}

TEST_F(SafetensorsTest, ErrorHeaderNestedTooDeep) {
  // Copying or printing a JSON value recurses once per level: 200,000 levels of brackets in
  // "shape" overflowed the stack (a crash, not an error) before the reader limited nesting.
  const int depth = 200'000;
  const std::string header = R"({"w":{"dtype":"F32","shape":)" + std::string(depth, '[') +
                             std::string(depth, ']') + R"(,"data_offsets":[0,0]}})";
  const std::string p = write_raw("deep.safetensors", header);
  expect_contains(read_error(p), {p, "nests JSON objects or arrays more than 16 levels deep"});
}

TEST_F(SafetensorsTest, ErrorsAreQkvErrors) {
  const std::string p = write_raw("trailing.safetensors", kTiledHeader, tiled_data() + "x");
  EXPECT_THROW(read_safetensors(p), qkv::Error);
}

// -------------------------------------------------------- Python interop ---

// The file comes from `python3 tests/python/safetensors_io.py --selftest-write PATH`,
// run by a CTest fixture as $QKV_REF_DIR/py_selftest.safetensors.
TEST(SafetensorsPythonInterop, ReadsFileWrittenByPythonModule) {
  const char* ref_dir = qkv::testing::ref_dir();
  ASSERT_NE(ref_dir, nullptr) << "QKV_REF_DIR not set: run through ctest, which writes the Python file first";
  const StFile file = read_safetensors(std::string(ref_dir) + "/py_selftest.safetensors");

  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.tensors.size(), 5u);

  const StTensor* a = file.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of<float>(*a), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  const StTensor* b = file.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, StDtype::I32);
  EXPECT_EQ(b->shape, std::vector<int64_t>{3});
  EXPECT_EQ(values_of<int32_t>(*b), (std::vector<int32_t>{7, -1, 3}));

  const StTensor* c = file.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, StDtype::F64);
  EXPECT_TRUE(c->shape.empty());
  EXPECT_EQ(values_of<double>(*c), std::vector<double>{2.5});

  const StTensor* d = file.find("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dtype, StDtype::I64);
  EXPECT_EQ(d->shape, std::vector<int64_t>{2});
  EXPECT_EQ(values_of<int64_t>(*d), (std::vector<int64_t>{int64_t{1} << 40, -5}));

  const StTensor* e = file.find("e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, StDtype::F32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(e->bytes.empty());

  // Same layout rules as the C++ writer: tensors by name, data start aligned.
  std::vector<std::string> names;
  for (const StTensor& t : file.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ((8 + header_length_of(read_whole_file(std::string(ref_dir) + "/py_selftest.safetensors"))) % 8, 0u);
}

}  // namespace
}  // namespace qkv::io
