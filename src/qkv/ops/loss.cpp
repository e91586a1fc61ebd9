#include "qkv/kernels/cross_entropy.h"

#include <limits>

#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {
void check_targets(const Tensor& targets, int64_t V, int32_t ignore_index) {
  const int32_t* t = targets.i32();
  for (int64_t n = 0, N = targets.numel(); n < N; ++n)
    QKV_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < V),
              "cross_entropy: target id " << t[n] << " out of range for vocabulary size " << V << " (row " << n
                                          << ")");
}
}  // namespace

CrossEntropyOut cross_entropy_forward(const Tensor& logits_in, const Tensor& targets_in, int32_t ignore_index,
                                      float label_smoothing) {
  QKV_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be (N, V), got " << logits_in.shape());
  QKV_CHECK(targets_in.dtype() == DType::I32 && targets_in.dim() == 1 && targets_in.size(0) == logits_in.size(0),
            "cross_entropy: targets " << targets_in.describe() << " must be i32 (N) for logits " << logits_in.shape());
  QKV_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f,
            "cross_entropy: label_smoothing " << label_smoothing << " outside [0, 1]");
  check_same_device("cross_entropy", {&logits_in, &targets_in});
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  CrossEntropyOut out;
  out.lse = empty_like_device(Dims{N}, logits);
  out.row_loss = empty_like_device(Dims{N}, logits);
  double total = 0;
  if (on_cuda(logits)) {
    if constexpr (cuda::kBuilt) {
      int64_t bad = -1;
      total = kernels::cuda::cross_entropy_forward(out.lse.f32(), out.row_loss.f32(), logits.f32(), targets.i32(), N,
                                                   V, ignore_index, label_smoothing, &out.valid, &bad);
      if (bad >= 0) check_targets(targets.narrow(0, bad, 1).to(Device::cpu()), V, ignore_index);  // throws
    }
  } else {
    check_targets(targets, V, ignore_index);
    total = kernels::cross_entropy_forward(out.lse.f32(), out.row_loss.f32(), logits.f32(), targets.i32(), N, V,
                                           ignore_index, label_smoothing, &out.valid);
  }
  // PyTorch divides by the count of non-ignored targets; with none that is 0/0 = NaN.
  const float mean = out.valid > 0 ? static_cast<float>(total / out.valid) : std::numeric_limits<float>::quiet_NaN();
  out.loss = Tensor::full(Dims{1}, mean).to(logits.device());
  return out;
}

void cross_entropy_backward(float dloss, const Tensor& logits_in, const Tensor& targets_in,
                            const CrossEntropyOut& saved, int32_t ignore_index, float label_smoothing,
                            Tensor* dlogits) {
  check_same_device("cross_entropy backward", {&logits_in, &targets_in});
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  const float scale = saved.valid > 0 ? dloss / static_cast<float>(saved.valid) : 0.f;
  if (prepare_slot(dlogits, logits.shape(), logits.device())) {
    Tensor g = empty_like_device(logits.shape(), logits);
    QKV_KERNEL(logits, cross_entropy_backward(g.f32(), logits.f32(), saved.lse.f32(), targets.i32(), N, V,
                                              ignore_index, label_smoothing, scale));
    accumulate(g, dlogits);
  } else {
    QKV_KERNEL(logits, cross_entropy_backward(dlogits->f32(), logits.f32(), saved.lse.f32(), targets.i32(), N, V,
                                              ignore_index, label_smoothing, scale));
  }
}

Tensor cross_entropy_backward_inplace(float dloss, Tensor logits, const Tensor& targets_in, const CrossEntropyOut& saved,
                                      int32_t ignore_index, float label_smoothing) {
  QKV_CHECK(logits.is_contiguous(), "cross_entropy_backward_inplace: logits must be contiguous");
  const Tensor targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  const float scale = saved.valid > 0 ? dloss / static_cast<float>(saved.valid) : 0.f;
  // Element c of a row is read once and then written: the kernel is safe with dlogits == logits.
  check_same_device("cross_entropy backward", {&logits, &targets_in});
  QKV_KERNEL(logits, cross_entropy_backward(logits.f32(), logits.f32(), saved.lse.f32(), targets.i32(), N, V,
                                            ignore_index, label_smoothing, scale));
  return logits;
}

}  // namespace qkv::ops
