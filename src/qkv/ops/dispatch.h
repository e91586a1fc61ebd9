// Dispatch on device, in one place: an op checks that its tensors share a device, allocates its
// outputs there, and calls the kernel of that device with QKV_KERNEL. The CUDA kernels
// (kernels/cuda/kernels.h) have the CPU kernels' names and arguments, so one call serves both.
#pragma once
#include <initializer_list>

#include "qkv/core/cuda_runtime.h"
#include "qkv/core/tensor.h"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::ops {

// True when `t` lives on a GPU, which is then made current for this thread (its stream takes the
// kernels). Always false in a build without CUDA.
inline bool on_cuda(const Tensor& t) {
  if constexpr (!cuda::kBuilt) return false;
  if (!t.device().is_cuda()) return false;
  cuda::activate(t.device());
  return true;
}

// Every defined tensor of an op on one device; throws naming the op and both devices.
inline void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    QKV_CHECK(t->device() == first->device(), op << ": tensors on different devices (" << first->describe()
                                                 << " and " << t->describe() << "); move them with .to(device)");
  }
}

// An f32 tensor of `shape` on t's device.
inline Tensor empty_like_device(const Dims& shape, const Tensor& t, DType dtype = DType::F32) {
  return Tensor::empty(shape, dtype, t.device());
}

}  // namespace qkv::ops

// QKV_KERNEL(x, gelu_forward(y, x, n)): kernels::cuda::gelu_forward(...) when x is on a GPU, else
// kernels::gelu_forward(...). Without CUDA the GPU branch is a discarded statement: it compiles
// against kernels/cuda/kernels.h and needs no definition at link time.
#define QKV_KERNEL(tensor, call)                                   \
  do {                                                             \
    if constexpr (::qkv::cuda::kBuilt) {                           \
      if (::qkv::ops::on_cuda(tensor)) {                           \
        ::qkv::kernels::cuda::call;                                \
        break;                                                     \
      }                                                            \
    }                                                              \
    ::qkv::kernels::call;                                          \
  } while (0)
