// Softmax, log-softmax and cross-entropy on the GPU: the twins of kernels/softmax.cpp,
// log_softmax.cpp and cross_entropy.cpp. One block per row (rows are long: a vocabulary, a row of
// scores), threads over the row's columns, sums by warp shuffles and then across the block's warps in
// a fixed order, so a row's result does not depend on scheduling.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

using detail::block_reduce;
using detail::Max;
using detail::Sum;

constexpr int kMaxThreads = 512;
// Rows past this many blocks are taken by the same blocks again (grid-stride), so no row count can
// exceed the grid's limit.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// Threads for a row of C columns: a whole number of warps, at most one per column rounded up.
int threads_for(int64_t C) {
  const int64_t warps = std::clamp<int64_t>((C + 31) / 32, 1, kMaxThreads / 32);
  return static_cast<int>(warps * 32);
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>(std::min(rows, kMaxBlocks)); }

struct Min {
  template <class T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
// log_softmax's normaliser is NaN when any logit is: even a row of NaN and -inf gives NaN.
struct MaxKeepNaN {
  __device__ float operator()(float a, float b) const { return isnan(a) ? a : (isnan(b) ? b : fmaxf(a, b)); }
};

// y = exp(x - max) * (1 / sum), as softmax_row. y may be x: each element is read, then written by
// the same thread, after every thread's reads of the row for the sums.
__global__ void softmax_forward_kernel(float* y, const float* x, int64_t rows, int64_t C) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, xr[c]);
    mx = block_reduce(mx, Max{});
    float sum = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(xr[c] - mx);
    sum = block_reduce(sum, Sum{});
    const float inv = 1.f / sum;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = expf(xr[c] - mx) * inv;
  }
}

// dx = y * (dy - sum(dy * y)); dx may be dy (read before written, by the same thread).
__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, int64_t rows, int64_t C,
                                        bool accumulate) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
    float dot = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dyr[c] * yr[c];
    dot = block_reduce(dot, Sum{});
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = yr[c] * (dyr[c] - dot);
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
  }
}

// x -= max + log(sum exp(x - max)), the sum in double (as logsumexp_row); a row of -inf (or no
// column) keeps -inf as its normaliser.
__global__ void log_softmax_kernel(float* x, float* lse, int64_t N, int64_t C) {
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    float* xr = x + r * C;
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = MaxKeepNaN{}(mx, xr[c]);
    mx = block_reduce(mx, MaxKeepNaN{});
    float l = mx;
    if (!(isinf(mx) && mx < 0.f)) {  // uniform across the block: every thread has the same mx
      double sum = 0.0;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += static_cast<double>(expf(xr[c] - mx));
      sum = block_reduce(sum, Sum{});
      l = mx + static_cast<float>(log(sum));
    }
    if (lse && threadIdx.x == 0) lse[r] = l;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) xr[c] -= l;
  }
}

// Per row: lse, the row's loss (0 when ignored or out of range) as float and as double (the sum's
// input), as cross_entropy_forward.
__global__ void cross_entropy_rows_kernel(float* lse, float* row_loss, double* row_loss_d, const float* logits,
                                          const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                          float label_smoothing) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* x = logits + n * V;
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, x[c]);
    mx = block_reduce(mx, Max{});
    double sum_exp = 0.0, sum_x = 0.0;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
      const float v = x[c];
      sum_exp += static_cast<double>(expf(v - mx));
      sum_x += static_cast<double>(v);
    }
    sum_exp = block_reduce(sum_exp, Sum{});
    sum_x = block_reduce(sum_x, Sum{});
    if (threadIdx.x != 0) continue;
    const double l = static_cast<double>(mx) + log(sum_exp);
    lse[n] = static_cast<float>(l);
    const int32_t t = targets[n];
    double loss = 0.0;
    if (t != ignore_index && t >= 0 && t < V) {
      const double nll = l - static_cast<double>(x[t]);
      const double smooth = static_cast<double>(V) * l - sum_x;
      // The CPU's types: (1.0 - eps) in double, eps / V in float.
      loss = (1.0 - static_cast<double>(label_smoothing)) * nll +
             static_cast<double>(label_smoothing / static_cast<float>(V)) * smooth;
    }
    if (row_loss) row_loss[n] = static_cast<float>(loss);
    row_loss_d[n] = loss;
  }
}

struct CrossEntropyTotals {
  double total;
  long long valid;
  long long first_bad;  // N when every target is valid or ignored
};

// One block: the sum of the rows' losses, the count of valid rows and the first bad row, in a fixed
// order (deterministic, no atomics).
__global__ void cross_entropy_totals_kernel(CrossEntropyTotals* out, const double* row_loss_d,
                                            const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  double total = 0.0;
  long long valid = 0, first_bad = static_cast<long long>(N);
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    const int32_t t = targets[n];
    if (t == ignore_index) continue;
    if (t >= 0 && t < V) {
      total += row_loss_d[n];
      ++valid;
    } else if (n < first_bad) {
      first_bad = static_cast<long long>(n);
    }
  }
  total = block_reduce(total, Sum{});
  valid = block_reduce(valid, Sum{});
  first_bad = block_reduce(first_bad, Min{});
  if (threadIdx.x == 0) *out = CrossEntropyTotals{total, valid, first_bad};
}

// g = scale * (exp(x - lse) - eps / V), then g[target] -= scale * (1 - eps): the CPU's two roundings.
// Ignored rows get 0. dlogits may be logits: each element is read and then written by one thread.
__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                              const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                              float label_smoothing, float scale, float uniform) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    float* g = dlogits + n * V;
    const int32_t t = targets[n];
    if (t == ignore_index) {
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x) g[c] = 0.f;
      continue;
    }
    const float* x = logits + n * V;
    const float l = lse[n];
    const float target_term = scale * (1.f - label_smoothing);
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
      float v = scale * (expf(x[c] - l) - uniform);
      if (c == t) v -= target_term;
      g[c] = v;
    }
  }
}

}  // namespace

void softmax_forward(float* y, const float* x, int64_t rows, int64_t C) {
  if (rows <= 0 || C <= 0) return;
  softmax_forward_kernel<<<blocks_for(rows), threads_for(C), 0, qkv::cuda::current_stream()>>>(y, x, rows, C);
  QKV_CUDA_CHECK_LAUNCH("softmax_forward");
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate) {
  if (rows <= 0 || C <= 0) return;
  softmax_backward_kernel<<<blocks_for(rows), threads_for(C), 0, qkv::cuda::current_stream()>>>(dx, dy, y, rows, C,
                                                                                                 accumulate);
  QKV_CUDA_CHECK_LAUNCH("softmax_backward");
}

void log_softmax_rows(float* x, float* lse, int64_t N, int64_t C) {
  // C == 0 still gives each row its normaliser (-inf), as logsumexp_row does.
  if (N <= 0) return;
  log_softmax_kernel<<<blocks_for(N), threads_for(C), 0, qkv::cuda::current_stream()>>>(x, lse, N, C);
  QKV_CUDA_CHECK_LAUNCH("log_softmax_rows");
}

double cross_entropy_forward(float* lse, float* row_loss, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int32_t ignore_index, float label_smoothing, int64_t* valid,
                             int64_t* bad_target) {
  *valid = 0;
  *bad_target = -1;
  if (N <= 0) return 0.0;
  cudaStream_t stream = qkv::cuda::current_stream();
  // One allocation: the rows' losses in double, then the totals.
  const size_t loss_bytes = static_cast<size_t>(N) * sizeof(double);
  void* buffer = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(&buffer, loss_bytes + sizeof(CrossEntropyTotals), stream));
  double* row_loss_d = static_cast<double*>(buffer);
  auto* totals = reinterpret_cast<CrossEntropyTotals*>(static_cast<char*>(buffer) + loss_bytes);
  CrossEntropyTotals host{};
  try {
    cross_entropy_rows_kernel<<<blocks_for(N), threads_for(V), 0, stream>>>(lse, row_loss, row_loss_d, logits, targets,
                                                                            N, V, ignore_index, label_smoothing);
    QKV_CUDA_CHECK_LAUNCH("cross_entropy_forward");
    cross_entropy_totals_kernel<<<1, 1024, 0, stream>>>(totals, row_loss_d, targets, N, V, ignore_index);
    QKV_CUDA_CHECK_LAUNCH("cross_entropy_forward (totals)");
    QKV_CUDA_CHECK(cudaMemcpyAsync(&host, totals, sizeof(host), cudaMemcpyDeviceToHost, stream));
    QKV_CUDA_CHECK(cudaFreeAsync(buffer, stream));
    buffer = nullptr;
    QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    if (buffer) (void)cudaFreeAsync(buffer, stream);
    throw;
  }
  *valid = static_cast<int64_t>(host.valid);
  *bad_target = host.first_bad < N ? static_cast<int64_t>(host.first_bad) : -1;
  return host.total;
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, int64_t N,
                            int64_t V, int32_t ignore_index, float label_smoothing, float scale) {
  if (N <= 0 || V <= 0) return;
  const float uniform = label_smoothing / static_cast<float>(V);
  cross_entropy_backward_kernel<<<blocks_for(N), threads_for(V), 0, qkv::cuda::current_stream()>>>(
      dlogits, logits, lse, targets, N, V, ignore_index, label_smoothing, scale, uniform);
  QKV_CUDA_CHECK_LAUNCH("cross_entropy_backward");
}

}  // namespace qkv::kernels::cuda
