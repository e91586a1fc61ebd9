// For code that calls the CUDA runtime itself (core/cuda_runtime.cpp, kernels/cuda/*.cu): the
// check that turns a failed call into a qkv::Error naming it, and the current device's stream.
#pragma once
#include <cuda_runtime_api.h>

#include "qkv/core/error.h"

namespace qkv::cuda {

// The stream every kernel of the current device runs on (one per device, created on first use,
// non-blocking): work on it runs in the order queued, so a buffer freed to the pool may be handed
// out again at once.
cudaStream_t current_stream();

}  // namespace qkv::cuda

// QKV_CUDA_CHECK(cudaMemcpyAsync(...)): throws "cudaMemcpyAsync(...) failed: out of memory (file:line)".
// A failed call also leaves its error as the thread's last one, which the next kernel launch's check
// would report as its own (a caught out-of-memory error failing the next request): it is cleared
// before throwing. (A sticky error, an asynchronous fault, stays whatever is done.)
#define QKV_CUDA_CHECK(call)                                                                              \
  do {                                                                                                    \
    const cudaError_t qkv_cuda_status_ = (call);                                                          \
    if (qkv_cuda_status_ != cudaSuccess) (void)cudaGetLastError();                                        \
    QKV_CHECK(qkv_cuda_status_ == cudaSuccess, "CUDA: " << #call << " failed: "                            \
                                                          << cudaGetErrorString(qkv_cuda_status_) << " ("   \
                                                          << __FILE__ << ":" << __LINE__ << ")");          \
  } while (0)

// After a kernel launch: a bad configuration or an earlier asynchronous fault, named by kernel.
#define QKV_CUDA_CHECK_LAUNCH(kernel_name)                                                                \
  do {                                                                                                    \
    const cudaError_t qkv_cuda_status_ = cudaGetLastError();                                              \
    QKV_CHECK(qkv_cuda_status_ == cudaSuccess, "CUDA: kernel " << kernel_name << " failed to launch: "     \
                                                                 << cudaGetErrorString(qkv_cuda_status_)); \
  } while (0)
