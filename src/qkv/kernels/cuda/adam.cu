// Adam on a GPU: every parameter of a model updated in a few launches (multi-tensor, as apex's and
// PyTorch's fused optimizers do) rather than one launch a tensor (146 for GPT-2 small), with the
// CPU's float32 operations element by element.
#include <cstdint>
#include <vector>

#include "qkv/core/cuda_check.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

// kernels/adam.cpp's operations with the CPU build's rounding (its assembly): the weight decay and
// the parameter update are FMAs, the moments fma(m, beta1, (1 - beta1) * g) and
// fma(v, beta2, (1 - beta2) * (g * g)), the denominator sqrt(v) / bc2 + eps rounded step by step.
__device__ void adam_element(const AdamArrays& t, int64_t i, const kernels::AdamScalars& s) {
  const float p = t.param_scale != 1.f ? __fmul_rn(t.param[i], t.param_scale) : t.param[i];
  float g = t.grad[i];
  if (s.weight_decay != 0.f) g = fmaf(s.weight_decay, p, g);
  const float mi = fmaf(t.m[i], s.beta1, __fmul_rn(s.one_minus_beta1, g));
  const float vi = fmaf(t.v[i], s.beta2, __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
  t.m[i] = mi;
  t.v[i] = vi;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
  t.param[i] = fmaf(-s.step_size, __fdiv_rn(mi, denom), p);
}

// One launch's work, passed by value as the kernel's argument (no copy to the device, so no wait
// for the host): up to kTensors tensors and kChunks chunks of kChunk elements, block b updating
// chunk b. Kernel arguments may take 4 KB.
constexpr int kTensors = 36;
constexpr int kChunks = 256;
constexpr int64_t kChunk = 1 << 16;
constexpr unsigned kThreads = 256;
struct AdamLaunch {
  AdamArrays tensors[kTensors];
  int32_t chunk_of_tensor[kChunks];  // which chunk of its tensor block b updates
  uint8_t tensor[kChunks];           // its tensor's place in `tensors`
};
static_assert(sizeof(AdamLaunch) + sizeof(kernels::AdamScalars) <= 4096, "kernel arguments are at most 4 KB");

__global__ void adam_many_kernel(const AdamLaunch launch, const kernels::AdamScalars s) {
  const AdamArrays t = launch.tensors[launch.tensor[blockIdx.x]];  // into registers
  const int64_t begin = launch.chunk_of_tensor[blockIdx.x] * kChunk;
  const int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) adam_element(t, i, s);
}

}  // namespace

void adam_step_many(const std::vector<AdamArrays>& arrays, const kernels::AdamScalars& s) {
  cudaStream_t stream = qkv::cuda::current_stream();
  AdamLaunch launch{};
  int tensors = 0, chunks = 0;
  const auto flush = [&] {
    if (chunks > 0) {
      adam_many_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(launch, s);
      QKV_CUDA_CHECK_LAUNCH("adam_step_many");
    }
    tensors = chunks = 0;
  };
  for (const AdamArrays& a : arrays) {
    const int64_t count = (a.n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < count; ++c) {
      if (chunks == kChunks || (c == 0 && tensors == kTensors)) flush();
      if (c == 0 || chunks == 0) launch.tensors[tensors++] = a;  // a tensor split over launches is in each
      launch.tensor[chunks] = static_cast<uint8_t>(tensors - 1);
      launch.chunk_of_tensor[chunks] = static_cast<int32_t>(c);
      ++chunks;
    }
  }
  flush();
}

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const kernels::AdamScalars& s) {
  adam_step_many({AdamArrays{param, grad, m, v, n, s.param_scale}}, s);
}

}  // namespace qkv::kernels::cuda
