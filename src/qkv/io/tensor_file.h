// Tensors <-> safetensors files, with strict name checking: the bridge between qkv::Tensor and
// the format-only reader/writer in safetensors.h.
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv::io {

// Writes tensors of any dtype (f32, i32, bf16, f16, i8; any strides) atomically; a packed one
// (Layout::Packed, a kernel's order) is refused naming it.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// A loaded file from which tensors are taken by name; what is left over is an error.
class TensorFile {
 public:
  TensorFile(std::string path, StFile file) : path_(std::move(path)), file_(std::move(file)) {}
  // Copies tensor `name` into `dst` (same shape, f32); fails naming the tensor if missing/mis-shaped.
  void take_into(const std::string& name, Tensor& dst);
  // Returns tensor `name` as a new Tensor of its dtype (f32, i32, bf16, f16, i8); fails if missing
  // or of another dtype.
  Tensor take(const std::string& name);
  bool has(const std::string& name) const { return file_.find(name) != nullptr; }
  // Marks a tensor as known-but-unused (e.g. a buffer qkv recomputes).
  void ignore(const std::string& name) { taken_.insert(name); }
  // Fails naming every tensor of the file that no one took (an unexpected / extra tensor).
  void expect_all_taken() const;
  std::string metadata_value(const std::string& key) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  StFile file_;
  std::set<std::string> taken_;
};

// options.allow_half: accept F16 and BF16 tensors (qkv's checkpoints are F32; a half file there is
// refused as an unknown dtype by default).
TensorFile load_tensors(const std::string& path, const StReadOptions& options = {});

}  // namespace qkv::io
