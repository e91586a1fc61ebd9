// In-place updates on whole tensors: the optimizer step, gradient scaling and accumulation, the
// squared norm, and decoding's log-softmax of each row.
#include <vector>

#include "qkv/kernels/adam.h"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/log_softmax.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

namespace {
void check_f32_contiguous(const Tensor& t, const char* op, const char* what) {
  QKV_CHECK(t.defined() && t.dtype() == DType::F32 && t.is_contiguous() && t.layout() == Layout::Strided,
            op << ": " << what << " must be a contiguous f32 tensor, got " << t.describe());
}
void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  QKV_CHECK(a.shape() == b.shape(), op << ": shapes " << a.shape() << " and " << b.shape() << " differ");
}

void check_adam_tensors(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  for (const auto& [t, what] : {std::pair<const Tensor*, const char*>{&param, "param"}, {&grad, "grad"},
                                {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}) {
    check_f32_contiguous(*t, "adam_step", what);
    check_same_shape(*t, param, "adam_step");
  }
  check_same_device("adam_step", {&param, &grad, &exp_avg, &exp_avg_sq});
}

kernels::AdamScalars kernel_scalars(const AdamScalars& s, float param_scale) {
  return {s.beta1,     s.one_minus_beta1,       s.beta2, s.one_minus_beta2, s.step_size,
          s.bias_correction2_sqrt, s.eps,   s.weight_decay, param_scale};
}
}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamScalars& s) {
  check_adam_tensors(param, grad, exp_avg, exp_avg_sq);
  const kernels::AdamScalars k = kernel_scalars(s, s.param_scale);
  QKV_KERNEL(param, adam_step(param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), param.numel(), k));
}

void adam_step_many(const std::vector<AdamTensors>& tensors, const AdamScalars& s) {
  for (const AdamTensors& t : tensors) check_adam_tensors(*t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq);
  // Each GPU's tensors in one call of the multi-tensor kernel; the CPU's one kernel call a tensor.
  std::vector<char> done(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (done[i]) continue;
    const Device device = tensors[i].param->device();
    if constexpr (cuda::kBuilt) {
      if (on_cuda(*tensors[i].param)) {
        std::vector<kernels::cuda::AdamArrays> arrays;
        for (size_t j = i; j < tensors.size(); ++j) {
          const AdamTensors& t = tensors[j];
          if (done[j] || t.param->device() != device) continue;
          arrays.push_back({t.param->f32(), t.grad->f32(), t.exp_avg->f32(), t.exp_avg_sq->f32(), t.param->numel(),
                            t.param_scale});
          done[j] = 1;
        }
        kernels::cuda::adam_step_many(arrays, kernel_scalars(s, 1.f));
        continue;
      }
    }
    const AdamTensors& t = tensors[i];
    kernels::adam_step(t.param->f32(), t.grad->f32(), t.exp_avg->f32(), t.exp_avg_sq->f32(), t.param->numel(),
                       kernel_scalars(s, t.param_scale));
  }
}

void scale_inplace(Tensor& x, float s) {
  check_f32_contiguous(x, "scale_inplace", "x");
  QKV_KERNEL(x, scale(x.f32(), x.f32(), s, x.numel()));
}

void add_inplace(Tensor& acc, const Tensor& x) {
  check_f32_contiguous(acc, "add_inplace", "acc");
  check_f32_contiguous(x, "add_inplace", "x");
  check_same_shape(acc, x, "add_inplace");
  check_same_device("add_inplace", {&acc, &x});
  QKV_KERNEL(acc, add_inplace(acc.f32(), x.f32(), acc.numel()));
}

double sum_of_squares(const Tensor& x) {
  check_f32_contiguous(x, "sum_of_squares", "x");
  if (on_cuda(x)) {
    if constexpr (cuda::kBuilt) return kernels::cuda::sum_of_squares(x.f32(), x.numel());
  }
  const float* d = x.f32();
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (x.numel() > 65536)
  for (int64_t i = 0; i < x.numel(); ++i) s += static_cast<double>(d[i]) * d[i];
  return s;
}

double sum_of_squares(const std::vector<Tensor>& xs) {
  if (!xs.empty() && on_cuda(xs.front())) {
    std::vector<std::pair<const float*, int64_t>> arrays;
    for (const Tensor& x : xs) {
      check_f32_contiguous(x, "sum_of_squares", "x");
      check_same_device("sum_of_squares", {&xs.front(), &x});
      arrays.emplace_back(x.f32(), x.numel());
    }
    if constexpr (cuda::kBuilt) return kernels::cuda::sum_of_squares_many(arrays);
  }
  double sum = 0;
  for (const Tensor& x : xs) sum += sum_of_squares(x);
  return sum;
}

Tensor log_softmax_rows_inplace(Tensor& x) {
  check_f32_contiguous(x, "log_softmax_rows_inplace", "x");
  QKV_CHECK(x.dim() == 2, "log_softmax_rows_inplace: expected (N, V), got " << x.shape());
  const int64_t N = x.size(0), V = x.size(1);
  Tensor lse = empty_like_device(Dims{N}, x);
  float* data = x.f32();
  float* out = lse.f32();
  if (on_cuda(x)) {
    if constexpr (cuda::kBuilt) kernels::cuda::log_softmax_rows(data, out, N, V);
    return lse;
  }
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t i = 0; i < N; ++i) out[i] = kernels::log_softmax_row(data + i * V, V);
  return lse;
}

}  // namespace qkv::ops
