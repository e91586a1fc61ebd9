#include "qkv/core/tensor.h"

#include <omp.h>

#include <cstring>
#include <utility>

namespace qkv {

const char* dtype_name(DType dtype) { return dtype == DType::F32 ? "f32" : "i32"; }

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
    : buffer_(o.buffer_), offset_(o.offset_), shape_(o.shape_), strides_(o.strides_), dtype_(o.dtype_) {
  retain();
}
Tensor::Tensor(Tensor&& o) noexcept
    : buffer_(o.buffer_), offset_(o.offset_), shape_(o.shape_), strides_(o.strides_), dtype_(o.dtype_) {
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

Tensor Tensor::empty(const Dims& shape, DType dtype) {
  for (int64_t d : shape) QKV_CHECK(d >= 0, "negative dimension in shape " << shape);
  Tensor t;
  t.buffer_ = BufferPool::acquire(static_cast<size_t>(shape.numel()) * 4);
  t.buffer_->refs.store(1, std::memory_order_relaxed);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty_unpooled(const Dims& shape, DType dtype) {
  for (int64_t d : shape) QKV_CHECK(d >= 0, "negative dimension in shape " << shape);
  Tensor t;
  t.buffer_ = BufferPool::acquire_unpooled(static_cast<size_t>(shape.numel()) * 4);
  t.buffer_->refs.store(1, std::memory_order_relaxed);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Dims& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.base(), 0, static_cast<size_t>(t.numel()) * 4);
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
  if (!values.empty()) std::memcpy(t.f32(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_ids(const Dims& shape, const std::vector<int32_t>& ids) {
  QKV_CHECK(static_cast<int64_t>(ids.size()) == shape.numel(),
            "from_ids: " << ids.size() << " ids for shape " << shape);
  Tensor t = empty(shape, DType::I32);
  if (!ids.empty()) std::memcpy(t.i32(), ids.data(), ids.size() * 4);
  return t;
}

int64_t Tensor::size(int d) const {
  int i = d < 0 ? dim() + d : d;
  QKV_CHECK(i >= 0 && i < dim(), "dimension " << d << " out of range for a tensor of shape " << shape_);
  return shape_[i];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

bool Tensor::fills_its_buffer() const {
  return defined() && offset_ == 0 && is_contiguous() && static_cast<size_t>(numel()) * 4 * 2 >= buffer_->bytes;
}

void* Tensor::base() const { return static_cast<float*>(buffer_->data) + offset_; }

float* Tensor::f32() {
  QKV_CHECK(defined() && dtype_ == DType::F32, "expected a defined f32 tensor, got " << describe());
  return static_cast<float*>(base());
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }
int32_t* Tensor::i32() {
  QKV_CHECK(defined() && dtype_ == DType::I32, "expected a defined i32 tensor, got " << describe());
  return static_cast<int32_t*>(base());
}
const int32_t* Tensor::i32() const { return const_cast<Tensor*>(this)->i32(); }

Tensor Tensor::reshape(const Dims& shape) const {
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
  int ia = a < 0 ? dim() + a : a, ib = b < 0 ? dim() + b : b;
  QKV_CHECK(ia >= 0 && ia < dim() && ib >= 0 && ib < dim(),
            "transpose(" << a << ", " << b << ") out of range for shape " << shape_);
  Tensor t = *this;
  std::swap(t.shape_[ia], t.shape_[ib]);
  std::swap(t.strides_[ia], t.strides_[ib]);
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  QKV_CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
            "slice0 [" << begin << ", " << end << ") out of range for shape " << shape_);
  Tensor t = *this;
  t.offset_ += begin * strides_[0];
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
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
// its strides (a transpose).
struct StridedCopy {
  uint32_t* dst;
  const Dims& dst_strides;
  const uint32_t* src;
  const Dims& src_strides;
  const Dims& shape;
  int outer_dims = 0;
  int64_t block = 1, run = 1, run_dst_stride = 0, run_src_stride = 0, outer = 1;

  StridedCopy(uint32_t* d, const Dims& ds, const uint32_t* s, const Dims& ss, const Dims& sh)
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
        std::memcpy(dst + d_off, src + s_off, static_cast<size_t>(block) * 4);
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

void strided_copy(uint32_t* dst, const Dims& dst_strides, const uint32_t* src, const Dims& src_strides, const Dims& shape) {
  const StridedCopy c(dst, dst_strides, src, src_strides, shape);
  const int64_t elements = c.outer * c.block * c.run;
  if (elements < kParallelCopyMin || c.outer < 2) return c.copy(0, c.outer);
#pragma omp parallel
  {
    const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
    c.copy(c.outer * t / T, c.outer * (t + 1) / T);
  }
}

// dst = src, n elements, the two ranges disjoint.
void contiguous_copy(uint32_t* dst, const uint32_t* src, int64_t n) {
  if (n < kParallelCopyMin) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
#pragma omp parallel
  {
    const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = n * t / T, end = n * (t + 1) / T;
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * 4);
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  QKV_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_,
            "copy_from: destination " << describe() << " vs source " << src.describe());
  if (numel() == 0) return;
  const auto last_element = [](const Tensor& t) {  // strides are never negative
    int64_t last = t.offset_;
    for (int d = 0; d < t.dim(); ++d) last += (t.shape_[d] - 1) * t.strides_[d];
    return last;
  };
  const bool may_overlap = buffer_ == src.buffer_ && offset_ <= last_element(src) && src.offset_ <= last_element(*this);
  if (is_contiguous() && src.is_contiguous()) {
    if (may_overlap)
      std::memmove(base(), src.base(), static_cast<size_t>(numel()) * 4);
    else
      contiguous_copy(static_cast<uint32_t*>(base()), static_cast<const uint32_t*>(src.base()), numel());
    return;
  }
  if (may_overlap) {  // two views of one storage whose element ranges meet: read from a copy
    const Tensor tmp = src.clone();
    strided_copy(static_cast<uint32_t*>(base()), strides_, static_cast<const uint32_t*>(tmp.base()), tmp.strides_, shape_);
    return;
  }
  strided_copy(static_cast<uint32_t*>(base()), strides_, static_cast<const uint32_t*>(src.base()), src.strides_, shape_);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

void Tensor::fill(float value) {
  QKV_CHECK(dtype_ == DType::F32 && is_contiguous(), "fill: needs a contiguous f32 tensor, got " << describe());
  float* p = f32();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void Tensor::zero() {
  QKV_CHECK(is_contiguous(), "zero: needs a contiguous tensor, got " << describe());
  std::memset(base(), 0, static_cast<size_t>(numel()) * 4);
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = contiguous();
  const float* p = c.f32();
  return std::vector<float>(p, p + numel());
}

std::vector<int32_t> Tensor::to_ids() const {
  Tensor c = contiguous();
  const int32_t* p = c.i32();
  return std::vector<int32_t>(p, p + numel());
}

float Tensor::item() const {
  QKV_CHECK(numel() == 1, "item() of a tensor with " << numel() << " elements " << describe());
  return *f32();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_.str();
}

}  // namespace qkv
