// The gradient-slot convention of ops.h, in one place.
#pragma once
#include "qkv/core/tensor.h"

namespace qkv::ops {

// Makes *slot ready to receive a gradient of `shape` on `device` (the op's). Returns true when the
// caller must add into it (the slot already held a gradient), false when it was freshly allocated
// and must be written.
// A slot may share its buffer with another gradient (an intermediate's first gradient is taken
// without a copy, fn::accumulate_grad): it gets a buffer of its own before anything adds into it.
inline bool prepare_slot(Tensor* slot, const Dims& shape, Device device) {
  if (slot->defined()) {
    QKV_CHECK(slot->shape() == shape && slot->is_contiguous() && slot->device() == device,
              "gradient slot " << slot->describe() << " does not match expected shape " << shape << " on "
                               << device.name());
    if (!slot->is_unique()) *slot = slot->clone();
    return true;
  }
  *slot = Tensor::empty(shape, DType::F32, device);
  return false;
}

// As prepare_slot, but a fresh slot is zero-filled: for kernels that only know how to accumulate.
inline void prepare_zeroed_slot(Tensor* slot, const Dims& shape, Device device) {
  if (!prepare_slot(slot, shape, device)) slot->zero();
}

}  // namespace qkv::ops
