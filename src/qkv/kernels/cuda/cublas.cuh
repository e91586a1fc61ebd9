// What the files that call cuBLAS share: its status in words, a check that makes a failed call a
// qkv::DeviceError naming it (an OutOfMemoryError when cuBLAS could not allocate), and one handle
// per device bound to the device's stream.
#pragma once
#include <cublas_v2.h>

#include <cstdint>

#include "qkv/core/error.h"

namespace qkv::kernels::cuda::detail {

const char* cublas_status_name(cublasStatus_t s);

// The current device's handle, created on first use (gemm.cu), with float32 products kept in
// float32 (no TF32 unless QKV_CUDA_TF32=1).
cublasHandle_t cublas_handle();

// A dimension as cuBLAS's int arguments take it.
inline int i32(int64_t v) { return static_cast<int>(v); }

}  // namespace qkv::kernels::cuda::detail

#define QKV_CUBLAS_CHECK(call)                                                                               \
  do {                                                                                                       \
    const cublasStatus_t qkv_cublas_status_ = (call);                                                        \
    if (qkv_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                       \
      std::ostringstream qkv_cublas_os_;                                                                     \
      qkv_cublas_os_ << "cuBLAS: " << #call << " failed: "                                                   \
                     << ::qkv::kernels::cuda::detail::cublas_status_name(qkv_cublas_status_) << " (status "   \
                     << static_cast<int>(qkv_cublas_status_) << ")";                                         \
      if (qkv_cublas_status_ == CUBLAS_STATUS_ALLOC_FAILED) throw ::qkv::OutOfMemoryError(qkv_cublas_os_.str()); \
      throw ::qkv::DeviceError(qkv_cublas_os_.str());                                                        \
    }                                                                                                        \
  } while (0)
