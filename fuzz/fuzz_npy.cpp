// Fuzz target: the .npy reader (qkv/io/npy.h, read_npy: what `qkv similar` reads back as its
// embedding cache).
// Input: the bytes of a .npy file.
// Invariants of an accepted file: version 1.0; every dimension in [0, 2^40), at most kMaxDims of
// them; the data after the header is exactly numel float32s, and the tensor holds those bytes
// unchanged; the header the writer makes for that tensor reads back as the same shape and bits.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/npy.h"

namespace {

size_t header_end(const uint8_t* data) { return 10 + (size_t{data[8]} | (size_t{data[9]} << 8)); }

bool same_tensor(const qkv::Tensor& a, const qkv::Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.f32(), b.f32(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = qkv::fuzz::scratch_path("array.npy");
  qkv::fuzz::write_file(path, qkv::fuzz::as_text(data, size));
  qkv::Tensor t;
  try {
    t = qkv::io::read_npy(path);
  } catch (const qkv::Error&) {
    return 0;
  }
  QKV_FUZZ_REQUIRE(size >= 10 && std::memcmp(data, "\x93NUMPY\x01", 7) == 0);
  QKV_FUZZ_REQUIRE(t.dtype() == qkv::DType::F32 && t.shape().size() <= qkv::kMaxDims);
  for (int64_t d : t.shape()) QKV_FUZZ_REQUIRE(d >= 0 && d < (int64_t{1} << 40));
  const size_t data_begin = header_end(data);
  QKV_FUZZ_REQUIRE(data_begin <= size);
  QKV_FUZZ_REQUIRE(size - data_begin == sizeof(float) * static_cast<size_t>(t.numel()));
  QKV_FUZZ_REQUIRE(std::memcmp(t.f32(), data + data_begin, size - data_begin) == 0);
  // Round trip through the writer: any qkv::Error here escapes and is a finding.
  static const std::string copy_path = qkv::fuzz::scratch_path("copy.npy");
  qkv::io::write_npy(copy_path, t);
  QKV_FUZZ_REQUIRE(same_tensor(t, qkv::io::read_npy(copy_path)));
  return 0;
}
