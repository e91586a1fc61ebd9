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

// Writes f32/i32 tensors (any strides) atomically.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// A loaded file from which tensors are taken by name; what is left over is an error.
class TensorFile {
 public:
  TensorFile(std::string path, StFile file) : path_(std::move(path)), file_(std::move(file)) {}
  // Copies tensor `name` into `dst` (same shape, f32); fails naming the tensor if missing/mis-shaped.
  void take_into(const std::string& name, Tensor& dst);
  // Returns tensor `name` as a new f32/i32 Tensor; fails if missing.
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

TensorFile load_tensors(const std::string& path);

}  // namespace qkv::io
