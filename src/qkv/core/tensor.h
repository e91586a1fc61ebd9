// Tensor: an n-dimensional view (shape + strides + offset) of a reference-counted buffer.
//
// - Row-major, PyTorch's dimension order: dim 0 is the outermost.
// - dtype float32 (values, gradients) or int32 (token ids, masks).
// - Views share storage: reshape (of a contiguous tensor), transpose, slice along dim 0.
//   contiguous() / clone() make explicit copies.
// - Storage comes from BufferPool, so a steady-state training step does not touch malloc.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/dims.h"

namespace qkv {

enum class DType : uint8_t { F32, I32 };
const char* dtype_name(DType dtype);

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // Uninitialised contiguous tensor.
  static Tensor empty(const Dims& shape, DType dtype = DType::F32);
  static Tensor zeros(const Dims& shape, DType dtype = DType::F32);
  // Uninitialised, with storage of its own from the system rather than the pool (BufferPool::
  // acquire_unpooled): for a large buffer that is only partly written (a key/value cache sized for
  // a length limit), whose unwritten pages then take no memory, and that goes back when freed.
  static Tensor empty_unpooled(const Dims& shape, DType dtype = DType::F32);
  static Tensor full(const Dims& shape, float value);
  static Tensor from_vector(const Dims& shape, const std::vector<float>& values);
  static Tensor from_ids(const Dims& shape, const std::vector<int32_t>& ids);

  bool defined() const { return buffer_ != nullptr; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int dim() const { return shape_.size(); }
  // size(-1) is the last dimension.
  int64_t size(int d) const;
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  bool is_contiguous() const;
  // True when no other Tensor shares this storage, so it may be overwritten in place.
  bool is_unique() const { return buffer_ && buffer_->refs.load(std::memory_order_acquire) == 1; }
  // True for a contiguous view from the start of its buffer that uses at least half of it (a fresh
  // tensor does: the pool hands out at most twice the size asked for). Holding such a view rather
  // than a copy keeps no large unused storage alive, as a slice of a bigger buffer would.
  bool fills_its_buffer() const;

  float* f32();
  const float* f32() const;
  int32_t* i32();
  const int32_t* i32() const;

  // Views (no copy).
  Tensor reshape(const Dims& shape) const;  // requires a contiguous tensor; one dim may be -1
  Tensor transpose(int a, int b) const;
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor narrow(int dim, int64_t start, int64_t length) const;  // [start, start + length) of `dim`

  // Copies.
  Tensor contiguous() const;  // returns *this if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  void copy_from(const Tensor& src);  // same shape, any strides
  void fill(float value);
  void zero();

  std::vector<float> to_vector() const;   // f32, any strides
  std::vector<int32_t> to_ids() const;    // i32, any strides
  float item() const;                     // single-element f32 tensor
  // "f32(64, 100, 512)"
  std::string describe() const;

 private:
  Buffer* buffer_ = nullptr;
  int64_t offset_ = 0;  // in elements
  Dims shape_;
  Dims strides_;        // in elements
  DType dtype_ = DType::F32;

  void* base() const;
  void retain() const;
  void drop();
};

Dims contiguous_strides(const Dims& shape);

}  // namespace qkv
