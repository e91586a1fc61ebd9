// Tensor: an n-dimensional view (shape + strides + offset) of a reference-counted buffer.
//
// - Row-major, PyTorch's dimension order: dim 0 is the outermost.
// - Any DType (core/dtype.h): float32 values and gradients, int32 ids and masks, bf16 / f16 / int8
//   weights. Shapes, strides and offsets count elements; storage is bytes, sized by the dtype.
// - A Device (core/device.h); storage comes from that device's pool. data<T>() of a GPU tensor is a
//   device pointer, for kernels; to_vector(), to_ids() and item() copy to the host.
// - Layout Packed: the storage holds a weight in the order a GEMM kernel reads it (panels of output
//   features; ops::pack_linear_weight), under its logical shape (out, in). Such a tensor can be
//   copied but not viewed or read element by element.
// - Views share storage: reshape (of a contiguous tensor), transpose, slice along dim 0.
//   contiguous() / clone() make explicit copies.
// - Storage comes from BufferPool, so a steady-state training step does not touch malloc.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/device.h"
#include "qkv/core/dims.h"
#include "qkv/core/dtype.h"

namespace qkv {

enum class Layout : uint8_t { Strided, Packed };

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // Uninitialised contiguous tensor.
  static Tensor empty(const Dims& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Dims& shape, DType dtype = DType::F32, Device device = Device::cpu());
  // Uninitialised storage of `storage_elements` elements for a weight of logical shape `shape` in
  // a kernel's packed order (Layout::Packed; the kernel knows the size, padding included), in
  // huge pages where the OS allows (BufferPool::advise_huge_pages).
  static Tensor empty_packed(const Dims& shape, DType dtype, int64_t storage_elements,
                             Device device = Device::cpu());
  // Uninitialised, with storage of its own from the system rather than the pool (BufferPool::
  // acquire_unpooled): for a large buffer that is only partly written (a key/value cache sized for
  // a length limit), whose unwritten pages then take no memory, and that goes back when freed.
  static Tensor empty_unpooled(const Dims& shape, DType dtype = DType::F32, Device device = Device::cpu());
  // On the host (then .to(device)).
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
  Device device() const { return buffer_ ? buffer_->device : Device::cpu(); }
  Layout layout() const { return layout_; }
  int64_t element_size() const { return dtype_size(dtype_); }
  // Bytes of storage the tensor's elements span when contiguous (a packed tensor's: its storage).
  int64_t nbytes() const { return storage_elements() * element_size(); }
  bool is_contiguous() const;
  // True when no other Tensor shares this storage, so it may be overwritten in place.
  bool is_unique() const { return buffer_ && buffer_->refs.load(std::memory_order_acquire) == 1; }
  // True for a contiguous view from the start of its buffer that uses at least half of it (a fresh
  // tensor does: the pool hands out at most twice the size asked for). Holding such a view rather
  // than a copy keeps no large unused storage alive, as a slice of a bigger buffer would.
  bool fills_its_buffer() const;

  // Typed access to the first element, checked: the tensor is defined and of T's dtype.
  template <class T>
  T* data() {
    check_access(dtype_of<T>::value);
    return static_cast<T*>(base());
  }
  template <class T>
  const T* data() const {
    return const_cast<Tensor*>(this)->data<T>();
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  int32_t* i32() { return data<int32_t>(); }
  const int32_t* i32() const { return data<int32_t>(); }
  // The first element's bytes, for code that handles every dtype (copies, conversions, I/O).
  void* raw_data();
  const void* raw_data() const;

  // Views (no copy).
  Tensor reshape(const Dims& shape) const;  // requires a contiguous tensor; one dim may be -1
  Tensor transpose(int a, int b) const;
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor narrow(int dim, int64_t start, int64_t length) const;  // [start, start + length) of `dim`

  // Copies.
  Tensor contiguous() const;  // returns *this if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy (a packed tensor: its storage copied)
  void copy_from(const Tensor& src);  // same shape and dtype, any strides
  // A contiguous copy converted to `dtype` (*this when it already is): between the floating types
  // with round-to-nearest-even (core/dtype.h), i8 and i32 to a floating type exactly. Into i8, and
  // from a floating type into i32, throws: quantizing needs scales (ops::quantize_linear_weight),
  // ids are not rounded floats.
  Tensor to(DType dtype) const;
  // A contiguous copy on `device` (*this when it is there already): host <-> GPU, GPU <-> GPU. A
  // packed tensor stays where it is (its order is a CPU kernel's). Throws naming the device when it
  // cannot be used (core/cuda_runtime.h: no CUDA build, no GPU, an index out of range).
  Tensor to(Device device) const;
  // Moves this tensor's storage to `device` in place: every Tensor that shares the buffer (a
  // parameter's handles in its module and in its optimizer, views of it) is then on `device`.
  // How a model moves (nn::Module::to). Not for packed tensors.
  void move_storage_to(Device device);
  void fill(float value);  // f32, bf16 or f16 (the value rounded once)
  void zero();

  std::vector<float> to_vector() const;   // any floating dtype, widened; any strides
  std::vector<int32_t> to_ids() const;    // i32, any strides
  float item() const;                     // single-element tensor of a floating dtype
  // "f32(64, 100, 512)"; "i8(512, 512)"; "bf16(3, 4) on cuda:0"
  std::string describe() const;

 private:
  Buffer* buffer_ = nullptr;
  int64_t offset_ = 0;  // in elements
  Dims shape_;
  Dims strides_;        // in elements
  DType dtype_ = DType::F32;
  Layout layout_ = Layout::Strided;
  int64_t packed_elements_ = 0;  // Layout::Packed: the storage's element count

  static Tensor allocate(const Dims& shape, DType dtype, Device device, bool pooled);
  int64_t storage_elements() const { return layout_ == Layout::Packed ? packed_elements_ : numel(); }
  void check_access(DType dtype) const;
  void copy_on_device(const Tensor& src);
  Tensor convert_on_device(DType dtype) const;
  void check_strided(const char* what) const;
  void* base() const;
  void retain() const;
  void drop();
};

Dims contiguous_strides(const Dims& shape);

}  // namespace qkv
