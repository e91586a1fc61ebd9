// qkv/io/safetensors.h — read and write the safetensors tensor-file format.
//
// File layout (little-endian throughout):
//   [8 bytes]  uint64 N: length of the JSON header in bytes
//   [N bytes]  UTF-8 JSON object:
//                { "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                  ...,
//                  "__metadata__": {"<key>": "<value>", ...} }          (optional)
//              data_offsets are byte offsets relative to the start of the data buffer.
//   [rest]     the data buffer: each tensor's elements, row-major, little-endian.
//
// This module is deliberately independent of any tensor class: tensors are
// (name, dtype, shape, raw bytes) records, so callers convert to and from their
// own representation.
//
// API (namespace qkv::io):
//   read_safetensors(path)        -> StFile. Validates everything it reads and throws
//                                    SafetensorsError naming the file, and where relevant
//                                    the tensor and byte offset (see "What a valid file is").
//   write_safetensors(path, file) -> writes a file the HF `safetensors` package can load:
//                                    tensors sorted by name, data contiguous, header padded
//                                    with spaces so the data buffer starts 8-byte aligned.
//                                    Atomic: writes "<path>.tmp.<pid>", fsyncs it, then
//                                    renames it over <path>.
//   st_dtype_size(d)              -> bytes per element (2, 4 or 8).
//   st_dtype_name(d)              -> the on-disk dtype string ("F32", "I32", ...).
//
// What a valid file is (the format's rules; anything else is refused, never loaded shifted):
//   - N <= 100,000,000 and 8 + N <= file size; the header starts with '{' and is one JSON
//     object (trailing whitespace, the writers' alignment padding, is allowed) with no key
//     repeated in any object;
//   - "__metadata__", if present, maps strings to strings;
//   - each tensor has a known dtype, non-negative dims whose byte size fits in 64 bits, and
//     data_offsets [begin, end) with end - begin == numel * dtype size;
//   - the tensors tile the data buffer: sorted by (begin, end), the first begins at 0, each
//     begins where the previous ended (no gap, no overlap; an empty tensor sits on a boundary),
//     and the last ends at the end of the file. The order of entries in the header is free.
//
// Only the dtypes the toolkit uses are supported (F32, I32, I64, F64, I8; F16 and BF16 as below);
// a file containing any other dtype is rejected with an "unknown dtype" error. F16 and BF16 (half-precision files such as
// Hugging Face checkpoints) are read only when StReadOptions::allow_half is set, for importers,
// which widen them to F32 with widen_half_to_f32(); qkv's own checkpoints are always F32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::io {

// Every failure in this module (I/O or malformed data) is reported as this type. It is a
// qkv::Error, so callers that handle bad input in general need not know about this module.
class SafetensorsError : public qkv::Error {
 public:
  using qkv::Error::Error;
};

enum class StDtype { F32, I32, I64, F64, F16, BF16, I8 };

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;        // empty shape = 0-dim scalar (one element)
  std::vector<unsigned char> bytes;  // raw little-endian data, size == numel * elem_size
};

struct StFile {
  std::vector<StTensor> tensors;                // in file order (ascending data offset)
  std::map<std::string, std::string> metadata;  // the "__metadata__" object
  // nullptr if no tensor has this name.
  const StTensor* find(const std::string& name) const;
};

struct StReadOptions {
  bool allow_half = false;  // accept F16 and BF16 tensors (otherwise "unknown dtype")
};

// Throws SafetensorsError with a message naming the file path and, for corrupt
// data, the byte offset and tensor name involved.
StFile read_safetensors(const std::string& path, const StReadOptions& options = {});

// Converts an F16 (IEEE binary16: subnormals, infinities and NaN included) or BF16 tensor to F32 in
// place; exact, since every half value is a float. Other dtypes are left as they are. `path` names
// the file in the error thrown for a tensor whose byte count does not match its shape.
void widen_half_to_f32(StTensor& tensor, const std::string& path);

// Atomic: writes path + ".tmp.<pid>", fsyncs, renames over path. Throws
// SafetensorsError on any I/O failure (naming the path and the errno text) or
// on an invalid StFile (duplicate names, negative dims, byte size mismatch).
void write_safetensors(const std::string& path, const StFile& file);

size_t st_dtype_size(StDtype dtype);
const char* st_dtype_name(StDtype dtype);

}  // namespace qkv::io
