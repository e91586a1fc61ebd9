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

namespace qkv::cuda {
// The exception of a failed call: an OutOfMemoryError for cudaErrorMemoryAllocation (the server
// answers 503 and makes room; cudaMallocAsync's scratch can run out as cudaMalloc can), else a
// DeviceError.
[[noreturn]] inline void throw_failure(cudaError_t status, const std::string& what) {
  const std::string message = what + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw DeviceError(message);
}
}  // namespace qkv::cuda

// QKV_CUDA_CHECK(cudaMemcpyAsync(...)): throws "CUDA: cudaMemcpyAsync(...) (file:line) failed: out of memory".
// A failed call also leaves its error as the thread's last one, which the next kernel launch's check
// would report as its own (a caught out-of-memory error failing the next request): it is cleared
// before throwing. (A sticky error, an asynchronous fault, stays whatever is done.)
#define QKV_CUDA_CHECK(call)                                                                              \
  do {                                                                                                    \
    const cudaError_t qkv_cuda_status_ = (call);                                                          \
    if (qkv_cuda_status_ != cudaSuccess) {                                                                \
      (void)cudaGetLastError();                                                                           \
      ::qkv::cuda::throw_failure(qkv_cuda_status_,                                                        \
                                 std::string("CUDA: ") + #call + " (" + __FILE__ + ":" + std::to_string(__LINE__) + \
                                     ") failed: ");                                                       \
    }                                                                                                     \
  } while (0)

// After a kernel launch: a bad configuration or an earlier asynchronous fault, named by kernel.
#define QKV_CUDA_CHECK_LAUNCH(kernel_name)                                                                \
  do {                                                                                                    \
    const cudaError_t qkv_cuda_status_ = cudaGetLastError();                                              \
    if (qkv_cuda_status_ != cudaSuccess)                                                                  \
      ::qkv::cuda::throw_failure(qkv_cuda_status_,                                                        \
                                 std::string("CUDA: kernel ") + (kernel_name) + " failed to launch: ");   \
  } while (0)
