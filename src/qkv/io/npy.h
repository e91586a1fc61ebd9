// NumPy's .npy format (version 1.0) for float32 matrices: what `qkv embed --out` writes and the
// embedding cache of `qkv similar` reads back. Little-endian '<f4', C order.
#pragma once
#include <string>

#include "qkv/core/tensor.h"

namespace qkv::io {

// The bytes of a .npy file holding `t` (f32, any shape).
std::string npy_bytes(const Tensor& t);
// Writes `t` to `path` atomically (temporary file + rename).
void write_npy(const std::string& path, const Tensor& t);
// Reads a '<f4' C-order .npy file; errors name the file and what is wrong with it.
Tensor read_npy(const std::string& path);

}  // namespace qkv::io
