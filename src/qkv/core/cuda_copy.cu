// The core's own device work: strided copies (Tensor::contiguous of a view) and bf16 conversions.
#include "qkv/core/cuda_check.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/core/dtype.h"

namespace qkv::cuda {
namespace {

struct StridedShape {
  int dims;
  int64_t shape[qkv::kMaxDims];
  int64_t dst_strides[qkv::kMaxDims];
  int64_t src_strides[qkv::kMaxDims];
};

template <class T>
__global__ void copy_strided_kernel(T* dst, const T* src, StridedShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, from = 0, to = 0;
    for (int d = s.dims - 1; d >= 0; --d) {  // element i's coordinates in row-major order, last dim fastest
      const int64_t c = rest % s.shape[d];
      from += c * s.src_strides[d];
      to += c * s.dst_strides[d];
      rest /= s.shape[d];
    }
    dst[to] = src[from];
  }
}

__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = bf16_bits_of(__float_as_uint(src[i]));
  }
}

__global__ void bf16_to_f32_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

template <class T>
void launch_copy(void* dst, const void* src, const StridedShape& s, int64_t n) {
  copy_strided_kernel<T><<<blocks_for(n), 256, 0, current_stream()>>>(static_cast<T*>(dst),
                                                                      static_cast<const T*>(src), s, n);
}

}  // namespace

void copy_strided(void* dst, const Dims& dst_strides, const void* src, const Dims& src_strides, const Dims& shape,
                  int64_t element_size) {
  StridedShape s{static_cast<int>(shape.size()), {}, {}, {}};
  for (int d = 0; d < s.dims; ++d) {
    s.shape[d] = shape[d];
    s.dst_strides[d] = dst_strides[d];
    s.src_strides[d] = src_strides[d];
  }
  const int64_t n = shape.numel();
  if (n == 0) return;
  switch (element_size) {
    case 8: launch_copy<uint64_t>(dst, src, s, n); break;
    case 4: launch_copy<uint32_t>(dst, src, s, n); break;
    case 2: launch_copy<uint16_t>(dst, src, s, n); break;
    default: launch_copy<uint8_t>(dst, src, s, n); break;
  }
  QKV_CUDA_CHECK_LAUNCH("copy_strided");
}

void f32_to_bf16(void* dst, const float* src, int64_t n) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), 256, 0, current_stream()>>>(static_cast<uint16_t*>(dst), src, n);
  QKV_CUDA_CHECK_LAUNCH("f32_to_bf16");
}

void bf16_to_f32(float* dst, const void* src, int64_t n) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<blocks_for(n), 256, 0, current_stream()>>>(dst, static_cast<const uint16_t*>(src), n);
  QKV_CUDA_CHECK_LAUNCH("bf16_to_f32");
}

}  // namespace qkv::cuda
