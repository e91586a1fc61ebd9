// NumPy's .npy format (version 1.0) for float32 matrices: what `qkv embed --out` writes and the
// embedding cache of `qkv similar` reads back. Little-endian '<f4', C order. Also 1-D arrays of
// strings ('<U', what np.array(["a", "bc"]) is) and .npz archives of several arrays (what
// np.savez writes: an uncompressed zip of NAME.npy members), for the attention files of
// `qkv translate/generate --attention-out`.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::io {

// The bytes of a .npy file holding `t` (f32, any shape).
std::string npy_bytes(const Tensor& t);
// Writes `t` to `path` atomically (temporary file + rename).
void write_npy(const std::string& path, const Tensor& t);
// Reads a '<f4' C-order .npy file; errors name the file and what is wrong with it.
Tensor read_npy(const std::string& path);

// The bytes of a .npy file holding the UTF-8 strings `items` as a 1-D '<U' array (UTF-32, padded
// to the longest; invalid UTF-8 becomes U+FFFD). NumPy reads it without pickle.
std::string npy_string_bytes(const std::vector<std::string>& items);
// The bytes of a .npz archive: each (name, .npy bytes) becomes the member "name.npy" (stored, as
// np.savez does); np.load(path)[name] gives the array back.
std::string npz_bytes(const std::vector<std::pair<std::string, std::string>>& arrays);
// Writes npz_bytes(arrays) to `path` atomically.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, std::string>>& arrays);

}  // namespace qkv::io
