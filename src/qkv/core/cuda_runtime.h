// The CUDA runtime as the core sees it: which GPUs there are, memory, copies between host and
// device, one stream per device. No CUDA types here, so any layer may include it; in a build
// without CUDA (-DQKV_CUDA=OFF) every function that would touch a GPU throws a qkv::Error saying so,
// and device_count() is 0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qkv/core/device.h"
#include "qkv/core/dims.h"

namespace qkv::cuda {

#ifdef QKV_HAVE_CUDA
inline constexpr bool kBuilt = true;
#else
inline constexpr bool kBuilt = false;
#endif

// GPUs this process can use: 0 without a CUDA build, a driver or a GPU (never throws).
int device_count();
// Throws a qkv::Error that says why `device` cannot be used (no CUDA build, no GPU, an index out
// of range), naming it; returns when it can.
void check_available(Device device);
// Makes `device` current for this thread (kernels launch on the current device's stream).
void activate(Device device);
// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
std::string describe(Device device);
// Empty while `device` can run work; else why not: a fault the GPU keeps (an illegal address, a
// kernel that crashed, an ECC error) after which every call of this process fails ("cuda:0: an
// illegal memory access was encountered"). The CPU, and a GPU this process never used or cannot
// see, have none. Never throws; any thread may ask (the server's /health does).
std::string device_fault(Device device);

// cudaMalloc / cudaFree on `device`. malloc returns null when the device is out of memory (and throws a
// DeviceError for any other failure: a fault the GPU keeps); free
// never throws (destructors call it).
void* malloc(Device device, size_t bytes);
void free(Device device, void* p);
struct MemoryInfo {
  size_t free = 0, total = 0;
};
MemoryInfo memory_info(Device device);

// Copies bytes between any two of host and device memory (dst_device / src_device say which),
// ordered after the work queued on the device's stream. A copy to or from the host waits for it
// (the host buffer is free on return); one within a GPU is queued.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Waits for the work queued on the device's stream.
void synchronize(Device device);

// On the device: the `shape` elements of src (viewed with src_strides) into dst (viewed with
// dst_strides); elements of `element_size` bytes, 1, 2, 4 or 8; the two ranges must not overlap.
void copy_strided(void* dst, const Dims& dst_strides, const void* src, const Dims& src_strides, const Dims& shape,
                  int64_t element_size);
// On the device: n floats <-> bfloat16 (round to nearest even, as core/dtype.h).
void f32_to_bf16(void* dst, const float* src, int64_t n);
void bf16_to_f32(float* dst, const void* src, int64_t n);
// On the device: n bytes set to zero.
void memset_zero(void* dst, size_t bytes);

}  // namespace qkv::cuda
