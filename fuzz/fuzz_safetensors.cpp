// Fuzz target: the safetensors reader (qkv/io/safetensors.h) and the TensorFile bridge.
// Input: the bytes of a .safetensors file.
// Invariants of an accepted file: each tensor holds numel * dtype-size bytes, the tensors' bytes
// plus the header fill the file exactly, writing the file back and reading it again gives the
// same tensors and metadata, and every F32/I32 tensor converts to a qkv::Tensor.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensor_file.h"

namespace {

using qkv::io::StFile;
using qkv::io::StTensor;

uint64_t element_count(const StTensor& t) {
  uint64_t n = 1;
  for (int64_t dim : t.shape) n *= static_cast<uint64_t>(dim);  // the reader bounds the product
  return n;
}

uint64_t header_length(const uint8_t* data) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | data[i];
  return value;
}

void check_accepted_file(const StFile& file, const uint8_t* data, size_t size) {
  uint64_t data_bytes = 0;
  for (const StTensor& t : file.tensors) {
    QKV_FUZZ_REQUIRE(t.bytes.size() == element_count(t) * qkv::io::st_dtype_size(t.dtype));
    data_bytes += t.bytes.size();
  }
  QKV_FUZZ_REQUIRE(size >= 8);
  QKV_FUZZ_REQUIRE(8 + header_length(data) + data_bytes == size);  // tensors tile the data
}

bool same_content(const StFile& a, const StFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const StTensor& t : a.tensors) {
    const StTensor* other = b.find(t.name);
    if (other == nullptr || other->dtype != t.dtype || other->shape != t.shape ||
        other->bytes != t.bytes) {
      return false;
    }
  }
  return true;
}

// An accepted file must survive write -> read unchanged; any qkv::Error here escapes and is a
// finding, since the writer refused what the reader accepted.
void check_round_trip(const StFile& file) {
  static const std::string copy_path = qkv::fuzz::scratch_path("copy.safetensors");
  qkv::io::write_safetensors(copy_path, file);
  QKV_FUZZ_REQUIRE(same_content(file, qkv::io::read_safetensors(copy_path)));
}

void check_tensor_conversion(const std::string& path, const StFile& file) {
  qkv::io::TensorFile tensors = qkv::io::load_tensors(path);
  for (const StTensor& t : file.tensors) {
    if (t.dtype != qkv::io::StDtype::F32 && t.dtype != qkv::io::StDtype::I32) {
      tensors.ignore(t.name);
      continue;
    }
    try {
      const qkv::Tensor converted = tensors.take(t.name);
      QKV_FUZZ_REQUIRE(static_cast<uint64_t>(converted.numel()) == element_count(t));
    } catch (const qkv::Error&) {
      tensors.ignore(t.name);  // e.g. more dims than qkv::Tensor supports: refused by name
    }
  }
  tensors.expect_all_taken();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = qkv::fuzz::scratch_path("input.safetensors");
  qkv::fuzz::write_file(path, qkv::fuzz::as_text(data, size));
  StFile file;
  try {
    file = qkv::io::read_safetensors(path);
  } catch (const qkv::Error&) {
    return 0;  // refused, with a message: the expected outcome for most inputs
  }
  check_accepted_file(file, data, size);
  check_round_trip(file);
  check_tensor_conversion(path, file);
  return 0;
}
