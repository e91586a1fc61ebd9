// Adam on a GPU: every parameter of a model updated in a few launches (multi-tensor, as apex's and
// PyTorch's fused optimizers do) rather than one launch a tensor (146 for GPT-2 small), with the
// CPU's float32 operations element by element.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "qkv/core/cuda_check.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

// kernels/adam.cpp's operations with the CPU build's rounding (its assembly): the weight decay and
// the parameter update are FMAs, the moments fma(m, beta1, (1 - beta1) * g) and
// fma(v, beta2, (1 - beta2) * (g * g)), the denominator sqrt(v) / bc2 + eps rounded step by step.
__device__ __forceinline__ void adam_value(float& param, float g, float& m, float& v, float param_scale,
                                           const kernels::AdamScalars& s) {
  const float p = param_scale != 1.f ? __fmul_rn(param, param_scale) : param;
  if (s.weight_decay != 0.f) g = fmaf(s.weight_decay, p, g);
  m = fmaf(m, s.beta1, __fmul_rn(s.one_minus_beta1, g));
  v = fmaf(v, s.beta2, __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  param = fmaf(-s.step_size, __fdiv_rn(m, denom), p);
}

__device__ __forceinline__ void adam_element(const AdamArrays& t, int64_t i, const kernels::AdamScalars& s) {
  float p = t.param[i], m = t.m[i], v = t.v[i];
  adam_value(p, t.grad[i], m, v, t.param_scale, s);
  t.m[i] = m;
  t.v[i] = v;
  t.param[i] = p;
}

// One launch's work, passed by value as the kernel's argument (no copy to the device, so no wait
// for the host): up to kTensors tensors and kChunks chunks of kChunk elements, block b updating
// chunk b. Kernel arguments may take 4 KB.
constexpr int kTensors = 36;
constexpr int kChunks = 256;
constexpr int64_t kChunk = 1 << 16;
struct AdamLaunch {
  AdamArrays tensors[kTensors];
  int32_t chunk_of_tensor[kChunks];  // which chunk of its tensor block b updates
  uint8_t tensor[kChunks];           // its tensor's place in `tensors`
};
static_assert(sizeof(AdamLaunch) + sizeof(kernels::AdamScalars) + sizeof(bool) <= 4096,
              "kernel arguments are at most 4 KB");

// Adam reads 16 bytes an element and writes 12: it runs at the memory's speed only with enough bytes
// in flight. Four elements a thread through 16-byte loads and stores (where the four arrays are
// 16-byte aligned: the pool's buffers are, and chunks start at multiples of 4 elements), 512
// threads a block. The first form, an element a thread and 256 threads a block, took 8.5 ms for
// GPT-2 small's 124M parameters on an H200, where the traffic needs about 0.7 ms;
// QKV_CUDA_ADAM_SCALAR=1 keeps it (bench_gpu_ops times both). The bits are the same either way.
constexpr unsigned kThreads = 512, kScalarThreads = 256;

__global__ void adam_many_kernel(const AdamLaunch launch, const kernels::AdamScalars s, bool vectorized) {
  const AdamArrays t = launch.tensors[launch.tensor[blockIdx.x]];  // into registers
  const int64_t begin = launch.chunk_of_tensor[blockIdx.x] * kChunk;
  const int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  int64_t scalar_begin = begin;
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(t.param) | reinterpret_cast<uintptr_t>(t.grad) |
                              reinterpret_cast<uintptr_t>(t.m) | reinterpret_cast<uintptr_t>(t.v);
  if (vectorized && addresses % 16 == 0) {
    const int64_t quads_end = begin + (end - begin) / 4 * 4;
    for (int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x); i < quads_end; i += 4 * blockDim.x) {
      float4 p = *reinterpret_cast<const float4*>(t.param + i), m = *reinterpret_cast<const float4*>(t.m + i);
      float4 v = *reinterpret_cast<const float4*>(t.v + i);
      const float4 g = *reinterpret_cast<const float4*>(t.grad + i);
      adam_value(p.x, g.x, m.x, v.x, t.param_scale, s);
      adam_value(p.y, g.y, m.y, v.y, t.param_scale, s);
      adam_value(p.z, g.z, m.z, v.z, t.param_scale, s);
      adam_value(p.w, g.w, m.w, v.w, t.param_scale, s);
      *reinterpret_cast<float4*>(t.param + i) = p;
      *reinterpret_cast<float4*>(t.m + i) = m;
      *reinterpret_cast<float4*>(t.v + i) = v;
    }
    scalar_begin = quads_end;  // the last 0-3 elements of a tensor
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) adam_element(t, i, s);
}

}  // namespace

void adam_step_many(const std::vector<AdamArrays>& arrays, const kernels::AdamScalars& s) {
  cudaStream_t stream = qkv::cuda::current_stream();
  AdamLaunch launch{};
  int tensors = 0, chunks = 0;
  const char* scalar = std::getenv("QKV_CUDA_ADAM_SCALAR");
  const bool vectorized = !(scalar && scalar[0] == '1');
  const unsigned threads = vectorized ? kThreads : kScalarThreads;
  const auto flush = [&] {
    if (chunks > 0) {
      adam_many_kernel<<<static_cast<unsigned>(chunks), threads, 0, stream>>>(launch, s, vectorized);
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
