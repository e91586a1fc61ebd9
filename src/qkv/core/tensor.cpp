#include "qkv/core/tensor.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "qkv/core/cuda_runtime.h"

namespace qkv {

Dims contiguous_strides(const Dims& shape) {
  Dims strides = shape;
  int64_t s = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor::Tensor(const Tensor& o)
    : buffer_(o.buffer_), offset_(o.offset_), shape_(o.shape_), strides_(o.strides_), dtype_(o.dtype_),
      layout_(o.layout_), packed_elements_(o.packed_elements_) {
  retain();
}
Tensor::Tensor(Tensor&& o) noexcept
    : buffer_(o.buffer_), offset_(o.offset_), shape_(o.shape_), strides_(o.strides_), dtype_(o.dtype_),
      layout_(o.layout_), packed_elements_(o.packed_elements_) {
  o.buffer_ = nullptr;
}
Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    o.retain();
    drop();
    buffer_ = o.buffer_;
    offset_ = o.offset_;
    shape_ = o.shape_;
    strides_ = o.strides_;
    dtype_ = o.dtype_;
    layout_ = o.layout_;
    packed_elements_ = o.packed_elements_;
  }
  return *this;
}
Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    drop();
    buffer_ = std::exchange(o.buffer_, nullptr);
    offset_ = o.offset_;
    shape_ = o.shape_;
    strides_ = o.strides_;
    dtype_ = o.dtype_;
    layout_ = o.layout_;
    packed_elements_ = o.packed_elements_;
  }
  return *this;
}
Tensor::~Tensor() { drop(); }

void Tensor::retain() const {
  if (buffer_) buffer_->refs.fetch_add(1, std::memory_order_relaxed);
}
void Tensor::drop() {
  if (buffer_ && buffer_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) BufferPool::release(buffer_);
  buffer_ = nullptr;
}

Tensor Tensor::allocate(const Dims& shape, DType dtype, Device device, bool pooled) {
  for (int64_t d : shape) QKV_CHECK(d >= 0, "negative dimension in shape " << shape);
  const size_t bytes = static_cast<size_t>(shape.numel() * dtype_size(dtype));
  Tensor t;
  t.buffer_ = pooled ? BufferPool::acquire(bytes, device) : BufferPool::acquire_unpooled(bytes, device);
  t.buffer_->refs.store(1, std::memory_order_relaxed);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Dims& shape, DType dtype, Device device) { return allocate(shape, dtype, device, true); }

Tensor Tensor::empty_unpooled(const Dims& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, false);
}

Tensor Tensor::empty_packed(const Dims& shape, DType dtype, int64_t storage_elements, Device device) {
  QKV_CHECK(storage_elements >= shape.numel(),
            "empty_packed: " << storage_elements << " elements of storage for shape " << shape);
  Tensor t = allocate(Dims{storage_elements}, dtype, device, true);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.layout_ = Layout::Packed;
  t.packed_elements_ = storage_elements;
  BufferPool::advise_huge_pages(t.buffer_);  // packed weights are read at every product
  return t;
}

Tensor Tensor::zeros(const Dims& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(const Dims& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Dims& shape, const std::vector<float>& values) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
            "from_vector: " << values.size() << " values for shape " << shape);
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_ids(const Dims& shape, const std::vector<int32_t>& ids) {
  QKV_CHECK(static_cast<int64_t>(ids.size()) == shape.numel(),
            "from_ids: " << ids.size() << " ids for shape " << shape);
  Tensor t = empty(shape, DType::I32);
  if (!ids.empty()) std::memcpy(t.i32(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::size(int d) const {
  int i = d < 0 ? dim() + d : d;
  QKV_CHECK(i >= 0 && i < dim(), "dimension " << d << " out of range for a tensor of shape " << shape_);
  return shape_[i];
}

bool Tensor::is_contiguous() const {
  return layout_ == Layout::Packed || strides_ == contiguous_strides(shape_) || numel() <= 1;
}

bool Tensor::fills_its_buffer() const {
  return defined() && offset_ == 0 && is_contiguous() && static_cast<size_t>(nbytes()) * 2 >= buffer_->bytes;
}

void* Tensor::base() const { return static_cast<char*>(buffer_->data) + offset_ * element_size(); }

void Tensor::check_access(DType dtype) const {
  QKV_CHECK(defined() && dtype_ == dtype, "expected a defined " << dtype_name(dtype) << " tensor, got " << describe());
}

void Tensor::check_strided(const char* what) const {
  QKV_CHECK(layout_ == Layout::Strided, what << " of a packed tensor " << describe()
                                             << " (its storage is in a kernel's order, not viewable)");
}

void* Tensor::raw_data() {
  QKV_CHECK(defined(), "raw_data of an undefined tensor");
  return base();
}
const void* Tensor::raw_data() const { return const_cast<Tensor*>(this)->raw_data(); }

Tensor Tensor::reshape(const Dims& shape) const {
  check_strided("reshape");
  QKV_CHECK(is_contiguous(), "reshape of a non-contiguous tensor " << describe() << "; call contiguous() first");
  Dims out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      QKV_CHECK(infer < 0, "reshape: more than one -1 in " << shape);
      infer = i;
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    QKV_CHECK(known > 0 && numel() % known == 0, "reshape: cannot view " << shape_ << " as " << shape);
    out[infer] = numel() / known;
  }
  QKV_CHECK(out.numel() == numel(), "reshape: cannot view " << shape_ << " (" << numel() << " elements) as " << shape);
  Tensor t = *this;
  t.shape_ = out;
  t.strides_ = contiguous_strides(out);
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  check_strided("transpose");
  int ia = a < 0 ? dim() + a : a, ib = b < 0 ? dim() + b : b;
  QKV_CHECK(ia >= 0 && ia < dim() && ib >= 0 && ib < dim(),
            "transpose(" << a << ", " << b << ") out of range for shape " << shape_);
  Tensor t = *this;
  std::swap(t.shape_[ia], t.shape_[ib]);
  std::swap(t.strides_[ia], t.strides_[ib]);
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  check_strided("slice0");
  QKV_CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
            "slice0 [" << begin << ", " << end << ") out of range for shape " << shape_);
  Tensor t = *this;
  t.offset_ += begin * strides_[0];
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  check_strided("narrow");
  const int i = d < 0 ? dim() + d : d;
  QKV_CHECK(i >= 0 && i < dim() && start >= 0 && length >= 0 && start + length <= shape_[i],
            "narrow(" << d << ", " << start << ", " << length << ") out of range for shape " << shape_);
  Tensor t = *this;
  t.offset_ += start * strides_[i];
  t.shape_[i] = length;
  return t;
}

namespace {
// Copies of at least this many elements are split between the threads: a training step's gradient
// copies (ops::accumulate, the attention heads' contiguous()) ran on one core while the other
// waited, 2-6% of a step's samples in memmove.
constexpr int64_t kParallelCopyMin = int64_t{1} << 18;

// dst = src for two strided views of `shape` that do not overlap. The trailing dims that are
// row-major in both views (size-1 dims ignored) form one block, copied with memcpy; the outer dims
// are walked with an odometer. With no such block, the last dim is copied element by element with
// its strides (a transpose). E: an unsigned integer of the element's size (only bits are moved).
template <class E>
struct StridedCopy {
  E* dst;
  const Dims& dst_strides;
  const E* src;
  const Dims& src_strides;
  const Dims& shape;
  int outer_dims = 0;
  int64_t block = 1, run = 1, run_dst_stride = 0, run_src_stride = 0, outer = 1;

  StridedCopy(E* d, const Dims& ds, const E* s, const Dims& ss, const Dims& sh)
      : dst(d), dst_strides(ds), src(s), src_strides(ss), shape(sh) {
    outer_dims = static_cast<int>(shape.size());
    while (outer_dims > 0) {
      const int k = outer_dims - 1;
      if (shape[k] != 1 && (dst_strides[k] != block || src_strides[k] != block)) break;
      block *= shape[k];
      --outer_dims;
    }
    if (block == 1 && outer_dims > 0) {  // the strided last dim
      --outer_dims;
      run = shape[outer_dims];
      run_dst_stride = dst_strides[outer_dims];
      run_src_stride = src_strides[outer_dims];
    }
    for (int k = 0; k < outer_dims; ++k) outer *= shape[k];
  }

  // Outer positions [begin, end): the odometer starts at begin's digits.
  void copy(int64_t begin, int64_t end) const {
    int64_t idx[kMaxDims] = {};
    int64_t d_off = 0, s_off = 0;
    for (int64_t k = outer_dims - 1, rest = begin; k >= 0; --k) {
      idx[k] = rest % shape[k];
      rest /= shape[k];
      d_off += idx[k] * dst_strides[k];
      s_off += idx[k] * src_strides[k];
    }
    for (int64_t o = begin; o < end; ++o) {
      if (block > 1) {
        std::memcpy(dst + d_off, src + s_off, static_cast<size_t>(block) * sizeof(E));
      } else {
        for (int64_t i = 0; i < run; ++i) dst[d_off + i * run_dst_stride] = src[s_off + i * run_src_stride];
      }
      for (int k = outer_dims - 1; k >= 0; --k) {
        if (++idx[k] < shape[k]) {
          d_off += dst_strides[k];
          s_off += src_strides[k];
          break;
        }
        d_off -= (shape[k] - 1) * dst_strides[k];
        s_off -= (shape[k] - 1) * src_strides[k];
        idx[k] = 0;
      }
    }
  }
};

template <class E>
void strided_copy_of(E* dst, const Dims& dst_strides, const E* src, const Dims& src_strides, const Dims& shape) {
  const StridedCopy<E> c(dst, dst_strides, src, src_strides, shape);
  const int64_t elements = c.outer * c.block * c.run;
  if (elements < kParallelCopyMin || c.outer < 2) return c.copy(0, c.outer);
#pragma omp parallel
  {
    const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
    c.copy(c.outer * t / T, c.outer * (t + 1) / T);
  }
}

// The element-size dispatch of the strided copy (raw bytes of `element_size` each).
void strided_copy(void* dst, const Dims& dst_strides, const void* src, const Dims& src_strides, const Dims& shape,
                  int64_t element_size) {
  switch (element_size) {
    case 4:
      return strided_copy_of(static_cast<uint32_t*>(dst), dst_strides, static_cast<const uint32_t*>(src), src_strides,
                             shape);
    case 2:
      return strided_copy_of(static_cast<uint16_t*>(dst), dst_strides, static_cast<const uint16_t*>(src), src_strides,
                             shape);
    default:
      return strided_copy_of(static_cast<uint8_t*>(dst), dst_strides, static_cast<const uint8_t*>(src), src_strides,
                             shape);
  }
}

// dst = src, n bytes, the two ranges disjoint (split in whole elements of `element_size`).
void contiguous_copy(void* dst, const void* src, int64_t n, int64_t element_size) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (n < kParallelCopyMin * 4) {
    std::memcpy(d, s, static_cast<size_t>(n));
    return;
  }
  const int64_t elements = n / element_size;
#pragma omp parallel
  {
    const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = elements * t / T * element_size, end = elements * (t + 1) / T * element_size;
    std::memcpy(d + begin, s + begin, static_cast<size_t>(end - begin));
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  QKV_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_ && layout_ == src.layout_ &&
                storage_elements() == src.storage_elements() && device() == src.device(),
            "copy_from: destination " << describe() << " vs source " << src.describe());
  if (numel() == 0) return;
  const int64_t E = element_size();
  if (device().is_cuda()) {
    copy_on_device(src);
    return;
  }
  const auto last_element = [](const Tensor& t) {  // strides are never negative
    int64_t last = t.offset_;
    for (int d = 0; d < t.dim(); ++d) last += (t.shape_[d] - 1) * t.strides_[d];
    return last;
  };
  const bool may_overlap = buffer_ == src.buffer_ && offset_ <= last_element(src) && src.offset_ <= last_element(*this);
  if (is_contiguous() && src.is_contiguous()) {
    if (may_overlap)
      std::memmove(base(), src.base(), static_cast<size_t>(nbytes()));
    else
      contiguous_copy(base(), src.base(), nbytes(), E);
    return;
  }
  if (may_overlap) {  // two views of one storage whose element ranges meet: read from a copy
    const Tensor tmp = src.clone();
    strided_copy(base(), strides_, tmp.base(), tmp.strides_, shape_, E);
    return;
  }
  strided_copy(base(), strides_, src.base(), src.strides_, shape_, E);
}

// copy_from on a GPU: one copy when both are contiguous, else the strided-copy kernel (a source
// that shares the destination's buffer is copied first).
void Tensor::copy_on_device(const Tensor& src) {
  cuda::activate(device());
  const Tensor from = buffer_ == src.buffer_ ? src.clone() : src;
  if (is_contiguous() && from.is_contiguous())
    cuda::copy(base(), device(), from.base(), device(), static_cast<size_t>(nbytes()));
  else
    cuda::copy_strided(base(), strides_, from.base(), from.strides_, shape_, element_size());
}

Tensor Tensor::to(Device device) const {
  QKV_CHECK(defined(), "to(" << device.name() << ") of an undefined tensor");
  if (device == this->device()) return *this;
  QKV_CHECK(layout_ == Layout::Strided, "to(" << device.name() << ") of " << describe()
                                              << ": a packed weight is in a CPU kernel's order");
  cuda::check_available(device);
  const Tensor c = contiguous();
  Tensor t = empty(shape_, dtype_, device);
  cuda::copy(t.base(), device, c.base(), c.device(), static_cast<size_t>(nbytes()));
  return t;
}

void Tensor::move_storage_to(Device device) {
  QKV_CHECK(defined(), "move_storage_to(" << device.name() << ") of an undefined tensor");
  if (device == this->device()) return;
  QKV_CHECK(layout_ == Layout::Strided, "move_storage_to(" << device.name() << ") of " << describe()
                                                           << ": a packed weight is in a CPU kernel's order");
  cuda::check_available(device);
  // The new storage takes the old one's place inside the shared Buffer, and the old storage leaves
  // in the Buffer object just acquired, which then goes back to the old device's pool.
  Buffer* other = BufferPool::acquire(buffer_->bytes, device);
  cuda::copy(other->data, device, buffer_->data, buffer_->device, buffer_->bytes);
  std::swap(buffer_->data, other->data);
  std::swap(buffer_->bytes, other->bytes);
  std::swap(buffer_->device, other->device);
  std::swap(buffer_->pooled, other->pooled);
  other->refs.store(1, std::memory_order_relaxed);
  BufferPool::release(other);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = layout_ == Layout::Packed ? empty_packed(shape_, dtype_, packed_elements_, device())
                                       : empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

namespace {
// Element i of a contiguous `from` tensor's storage as a float (floating types and integers).
float element_as_float(const void* p, DType from, int64_t i) {
  switch (from) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const bfloat16*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const float16*>(p)[i]);
    case DType::I8: return static_cast<const int8_t*>(p)[i];
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  }
  return 0.f;
}

void store_float(void* p, DType to, int64_t i, float value) {
  switch (to) {
    case DType::F32: static_cast<float*>(p)[i] = value; return;
    case DType::BF16: static_cast<bfloat16*>(p)[i] = f32_to_bf16(value); return;
    case DType::F16: static_cast<float16*>(p)[i] = f32_to_f16(value); return;
    default: return;
  }
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  QKV_CHECK(defined(), "to(" << dtype_name(dtype) << ") of an undefined tensor");
  if (dtype == dtype_) return contiguous();
  check_strided("to");
  if (device().is_cuda()) return convert_on_device(dtype);
  QKV_CHECK(dtype != DType::I8, "to(i8) of " << describe()
                                             << ": quantizing needs scales (ops::quantize_linear_weight)");
  if (dtype == DType::I32) {
    QKV_CHECK(dtype_ == DType::I8, "to(i32) of " << describe() << ": ids are not converted from floats");
    const Tensor c = contiguous();
    Tensor t = empty(shape_, DType::I32);
    for (int64_t i = 0, n = numel(); i < n; ++i) t.i32()[i] = c.data<int8_t>()[i];
    return t;
  }
  const Tensor c = contiguous();
  Tensor t = empty(shape_, dtype);
  const void* from = c.base();
  void* into = t.base();
  const int64_t n = numel();
  // float32 <-> bf16 in plain loops the compiler vectorizes: what mixed precision converts at every
  // step (activations kept for backward), where the generic per-element switch below costs more.
  if (dtype_ == DType::F32 && dtype == DType::BF16) {
    const float* x = static_cast<const float*>(from);
    uint16_t* y = static_cast<uint16_t*>(into);
#pragma omp parallel for if (n >= kParallelCopyMin)
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_bits_of(float_bits(x[i]));
    return t;
  }
  if (dtype_ == DType::BF16 && dtype == DType::F32) {
    const uint16_t* x = static_cast<const uint16_t*>(from);
    float* y = static_cast<float*>(into);
    constexpr int64_t kBlock = int64_t{1} << 14;
#pragma omp parallel for if (n >= kParallelCopyMin)
    for (int64_t at = 0; at < n; at += kBlock) widen_bf16(x + at, std::min(kBlock, n - at), y + at);
    return t;
  }
  // Float to float is exact (bf16 and f16 widen exactly; i32 beyond 2^24 rounds like a static_cast).
  if (n >= kParallelCopyMin) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) store_float(into, dtype, i, element_as_float(from, dtype_, i));
  } else {
    for (int64_t i = 0; i < n; ++i) store_float(into, dtype, i, element_as_float(from, dtype_, i));
  }
  return t;
}

// to(dtype) of a GPU tensor: f32 <-> bf16 (the weights of bf16 compute) on the device, the rarer
// pairs through the host.
Tensor Tensor::convert_on_device(DType dtype) const {
  const Tensor c = contiguous();
  cuda::activate(device());
  if (dtype_ == DType::F32 && dtype == DType::BF16) {
    Tensor t = empty(shape_, dtype, device());
    cuda::f32_to_bf16(t.base(), static_cast<const float*>(c.base()), numel());
    return t;
  }
  if (dtype_ == DType::BF16 && dtype == DType::F32) {
    Tensor t = empty(shape_, dtype, device());
    cuda::bf16_to_f32(static_cast<float*>(t.base()), c.base(), numel());
    return t;
  }
  return c.to(Device::cpu()).to(dtype).to(device());
}

void Tensor::fill(float value) {
  QKV_CHECK(is_floating(dtype_) && is_contiguous() && layout_ == Layout::Strided,
            "fill: needs a contiguous f32, bf16 or f16 tensor, got " << describe());
  if (numel() == 0) return;
  if (device().is_cuda()) {  // initialisation and tests, not hot: filled on the host, copied over
    Tensor host = empty(shape_, dtype_);
    host.fill(value);
    copy_from(host.to(device()));
    return;
  }
  store_float(base(), dtype_, 0, value);
  const int64_t E = element_size();
  char* p = static_cast<char*>(base());
  for (int64_t i = 1, n = numel(); i < n; ++i) std::memcpy(p + i * E, p, static_cast<size_t>(E));
}

void Tensor::zero() {
  QKV_CHECK(is_contiguous(), "zero: needs a contiguous tensor, got " << describe());
  if (device().is_cuda()) {
    cuda::activate(device());
    cuda::memset_zero(base(), static_cast<size_t>(nbytes()));
    return;
  }
  std::memset(base(), 0, static_cast<size_t>(nbytes()));
}

std::vector<float> Tensor::to_vector() const {
  QKV_CHECK(defined() && is_floating(dtype_), "to_vector: expected a floating tensor, got " << describe());
  check_strided("to_vector");
  const Tensor c = to(Device::cpu()).to(DType::F32);
  const float* p = c.f32();
  return std::vector<float>(p, p + numel());
}

std::vector<int32_t> Tensor::to_ids() const {
  Tensor c = contiguous().to(Device::cpu());
  const int32_t* p = c.i32();
  return std::vector<int32_t>(p, p + numel());
}

float Tensor::item() const {
  QKV_CHECK(numel() == 1, "item() of a tensor with " << numel() << " elements " << describe());
  QKV_CHECK(is_floating(dtype_), "item() of a non-floating tensor " << describe());
  if (device().is_cuda()) return to(Device::cpu()).item();
  return element_as_float(base(), dtype_, 0);
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  std::string s = std::string(dtype_name(dtype_)) + shape_.str();
  if (layout_ == Layout::Packed) s.insert(s.size() - 1, ", packed");
  if (device() != Device::cpu()) s += " on " + device().name();
  return s;
}

}  // namespace qkv
