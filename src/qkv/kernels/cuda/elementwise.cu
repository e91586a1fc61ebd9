// The elementwise kernels of kernels/elementwise.h (and their neighbours: tanh, dropout, bias
// reductions, ids masks, positional add, fill, the squared norm) on device arrays; Adam is adam.cu.
//
// Matching the CPU: GCC builds the CPU kernels with -ffp-contract=fast on x86-64-v3, so some of
// their a * b + c are one FMA and others are a product then a sum. nvcc contracts on its own
// choice, so wherever a product meets a sum, the kernels below say which with __fmul_rn (rounded
// apart, never fused) or fmaf (fused), as the CPU build does (read off its assembly). GELU and tanh
// are evaluated in double and rounded once: within an ulp or so of the CPU's (itself within a few
// ulp of exact). Do not build with --use_fast_math or -ftz=true: subnormals would flush to zero.
#include <algorithm>
#include <vector>
#include <cmath>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/kernels/random.h"

namespace qkv::kernels::cuda {
namespace {

using detail::block_sum;
using detail::Scratch;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// op(i) for every i < n, grid-stride.
template <class Op>
__global__ void for_each_kernel(int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    op(i);
}

template <class Op>
void launch_for_each(const char* name, int64_t n, Op op) {
  if (n <= 0) return;
  for_each_kernel<<<blocks_for(n), kThreads, 0, qkv::cuda::current_stream()>>>(n, op);
  QKV_CUDA_CHECK_LAUNCH(name);
}

// ---- plain arithmetic ---------------------------------------------------------------------------

struct AddOp {
  float* out;
  const float *a, *b;
  __device__ void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

struct MulOp {
  float* out;
  const float *a, *b;
  __device__ void operator()(int64_t i) const { out[i] = a[i] * b[i]; }
};

struct AddInplaceOp {
  float* acc;
  const float* x;
  __device__ void operator()(int64_t i) const { acc[i] = acc[i] + x[i]; }
};

struct ScaleOp {
  float* out;
  const float* x;
  float s;
  __device__ void operator()(int64_t i) const { out[i] = __fmul_rn(s, x[i]); }
};

// acc += s * x: one FMA, as the CPU build.
struct AxpyOp {
  float* acc;
  const float* x;
  float s;
  __device__ void operator()(int64_t i) const { acc[i] = fmaf(s, x[i], acc[i]); }
};

// out[i] = x[i] + row[i % width]: (rows, width) plus a row, or (B, T, D) plus a (T, D) table.
struct AddPeriodicOp {
  float* out;
  const float *x, *row;
  int64_t width;
  __device__ void operator()(int64_t i) const { out[i] = x[i] + row[i % width]; }
};

struct BroadcastRowsOp {
  float* out;
  const float* row;
  int64_t cols;
  __device__ void operator()(int64_t i) const { out[i] = row[i % cols]; }
};

struct FillOp {
  float* out;
  float value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

struct KeepMaskOp {
  int32_t* out;
  const int32_t* ids;
  int32_t pad_id;
  __device__ void operator()(int64_t i) const { out[i] = ids[i] != pad_id ? 1 : 0; }
};

// ---- activations --------------------------------------------------------------------------------

// dx = g, or dx += g (the sum rounded apart from g's product).
__device__ inline void store_grad(float* dx, int64_t i, float g, bool accumulate) {
  dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
}

struct MulBackwardOp {
  float* d;
  const float *dy, *other;
  bool accumulate;
  __device__ void operator()(int64_t i) const { store_grad(d, i, __fmul_rn(dy[i], other[i]), accumulate); }
};

struct ReluForwardOp {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] = x[i] > 0.f ? x[i] : 0.f; }
};

struct ReluBackwardOp {
  float* dx;
  const float *dy, *x;
  bool accumulate;
  __device__ void operator()(int64_t i) const { store_grad(dx, i, x[i] > 0.f ? dy[i] : 0.f, accumulate); }
};

struct SiluForwardOp {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] = x[i] / (1.f + expf(-x[i])); }
};

struct SiluBackwardOp {
  float* dx;
  const float *dy, *x;
  bool accumulate;
  __device__ void operator()(int64_t i) const {
    const float s = 1.f / (1.f + expf(-x[i]));
    store_grad(dx, i, dy[i] * (s * (1.f + x[i] * (1.f - s))), accumulate);
  }
};

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Exact GELU x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (erfc: no cancellation for x < 0). Below
// x = -40 the result underflows any float; clamping there keeps -inf * 0 (NaN) out, so
// gelu(-inf) = -0 as on the CPU. NaN fails the comparison and stays NaN.
__device__ inline float gelu_value(float xf) {
  double x = xf;
  if (x < -40.0) x = -40.0;
  return static_cast<float>(x * (0.5 * erfc(-x * kInvSqrt2)));
}

// gelu'(x) = Phi(x) + x phi(x), x clamped to [-40, 40] (the limits 0 and 1 there; no inf * 0).
// Near its root x = -0.75 the two terms cancel; double keeps 29 bits beyond float there.
__device__ inline float gelu_grad_value(float xf) {
  double x = xf;
  if (x < -40.0) x = -40.0;
  if (x > 40.0) x = 40.0;
  const double cdf = 0.5 * erfc(-x * kInvSqrt2);
  const double pdf = kInvSqrt2Pi * exp(-0.5 * x * x);
  return static_cast<float>(cdf + x * pdf);
}

constexpr double kSqrt2OverPi = 0.79788456080286536;
constexpr double kGeluCubic = 0.044715;

// GELU-tanh's pieces as the CPU's (gelu_lanes.h), in double: xc = x clamped to [-20, 20],
// u = k xc (1 + a xc^2), e = exp(-2|u|) in (0, 1], d = 1 / (1 + e). Then 1 + tanh(u) = 2 d for
// u >= 0 and 2 e d for u < 0, and 1 - tanh(u)^2 = 4 e d^2: nothing cancels and nothing overflows.
struct TanhParts {
  double xc, e, d;
  bool u_nonneg;
};
__device__ inline TanhParts tanh_parts(float xf) {
  double xc = xf;
  if (xc < -20.0) xc = -20.0;
  if (xc > 20.0) xc = 20.0;
  const double u = kSqrt2OverPi * xc * fma(kGeluCubic, xc * xc, 1.0);
  const double e = exp(-2.0 * fabs(u));
  return {xc, e, 1.0 / (1.0 + e), u >= 0.0};
}

// 0.5 x (1 + tanh u) = x d (u >= 0; x itself, so gelu_tanh(inf) = inf) or xc e d (u < 0).
__device__ inline float gelu_tanh_value(float x) {
  const TanhParts t = tanh_parts(x);
  return static_cast<float>(t.u_nonneg ? x * t.d : t.xc * t.e * t.d);
}

// dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du, du = k (1 + 3 a x^2); with w = 2 x du:
//   u >= 0: d + e d (w d);   u < 0: e d (1 + w d).
__device__ inline float gelu_tanh_grad_value(float x) {
  const TanhParts t = tanh_parts(x);
  const double du = kSqrt2OverPi * fma(3.0 * kGeluCubic, t.xc * t.xc, 1.0);
  const double w = 2.0 * t.xc * du;
  return static_cast<float>(t.u_nonneg ? t.d + t.e * t.d * (w * t.d) : t.e * t.d * (1.0 + w * t.d));
}

struct GeluForwardOp {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] = gelu_value(x[i]); }
};

// dx = dy * f'(x) (f' rounded to float first, as the CPU's lanes), or dx += it.
struct GeluBackwardOp {
  float* dx;
  const float *dy, *x;
  bool accumulate;
  __device__ void operator()(int64_t i) const {
    store_grad(dx, i, __fmul_rn(dy[i], gelu_grad_value(x[i])), accumulate);
  }
};

struct GeluTanhForwardOp {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] = gelu_tanh_value(x[i]); }
};

struct GeluTanhBackwardOp {
  float* dx;
  const float *dy, *x;
  bool accumulate;
  __device__ void operator()(int64_t i) const {
    store_grad(dx, i, __fmul_rn(dy[i], gelu_tanh_grad_value(x[i])), accumulate);
  }
};

// std::tanh of a float, here through double: correctly rounded but for the rarest ties.
struct TanhForwardOp {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] = static_cast<float>(tanh(static_cast<double>(x[i]))); }
};

// dx = dy * (1 - y^2), with 1 - y^2 one FMA as the CPU build (ops/elementwise.cpp).
struct TanhBackwardOp {
  float* dx;
  const float *dy, *y;
  bool accumulate;
  __device__ void operator()(int64_t i) const {
    const float v = y[i];
    store_grad(dx, i, __fmul_rn(dy[i], fmaf(-v, v, 1.f)), accumulate);
  }
};

// ---- dropout ------------------------------------------------------------------------------------

// out = keep ? in * (1 / (1 - p)) : 0, the CPU's lanes (dropout_lanes.h): the scale is the float
// 1.f / (1.f - p), multiplied (not divided), and a dropped element is +0 whatever its input.
struct DropoutOp {
  float* out;
  const float* in;
  float p, keep_scale;
  uint64_t seed, offset;
  bool accumulate;
  __device__ void operator()(int64_t i) const {
    const bool keep = kernels::dropout_keep(seed, offset + static_cast<uint64_t>(i), p);
    const float g = keep ? __fmul_rn(in[i], keep_scale) : 0.f;
    out[i] = accumulate ? __fadd_rn(out[i], g) : g;
  }
};

// ---- column sums (a linear layer's bias gradient) ------------------------------------------------

// Stage 1: block (32, 8) sums a 32-column tile over the rows r = blockIdx.y * 8 + threadIdx.y + k *
// gridDim.y * 8, in float as the CPU; the 8 row lanes are combined in a fixed order and the tile's
// partial goes to partial[blockIdx.y, c]. Stage 2 adds the gridDim.y partials of each column in
// order to out[c]. No atomics: the same inputs give the same bits on every run.
constexpr int kTileCols = 32, kTileRows = 8;

__global__ void column_partials_kernel(float* partial, const float* x, int64_t rows, int64_t cols) {
  __shared__ float sums[kTileRows][kTileCols];
  const int64_t c = blockIdx.x * int64_t{kTileCols} + threadIdx.x;
  float acc = 0.f;
  if (c < cols)
    for (int64_t r = blockIdx.y * int64_t{kTileRows} + threadIdx.y; r < rows; r += int64_t{gridDim.y} * kTileRows)
      acc += x[r * cols + c];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0.f;
  for (int k = 0; k < kTileRows; ++k) total += sums[k][threadIdx.x];
  partial[blockIdx.y * cols + c] = total;
}

__global__ void add_partials_kernel(float* out, const float* partial, int64_t splits, int64_t cols) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    float total = 0.f;
    for (int64_t s = 0; s < splits; ++s) total += partial[s * cols + c];
    out[c] += total;
  }
}

// ---- sum of squares -----------------------------------------------------------------------------

// partial[blockIdx.x] = sum of x[i]^2 over the block's grid-stride share, in double.
__global__ void sum_squares_partials_kernel(double* partial, const float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc = fma(v, v, acc);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: *total = sum of the partials.
__global__ void sum_partials_kernel(double* total, const double* partial, int64_t count) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *total = acc;
}

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) { launch_for_each("add", n, AddOp{out, a, b}); }

void mul(float* out, const float* a, const float* b, int64_t n) { launch_for_each("mul", n, MulOp{out, a, b}); }

void mul_backward(float* d, const float* dy, const float* other, int64_t n, bool accumulate) {
  launch_for_each("mul_backward", n, MulBackwardOp{d, dy, other, accumulate});
}

void add_inplace(float* acc, const float* x, int64_t n) {
  launch_for_each("add_inplace", n, AddInplaceOp{acc, x});
}

void scale(float* out, const float* x, float s, int64_t n) { launch_for_each("scale", n, ScaleOp{out, x, s}); }

void axpy(float* acc, const float* x, float s, int64_t n) { launch_for_each("axpy", n, AxpyOp{acc, x, s}); }

void add_row_broadcast(float* out, const float* x, const float* row, int64_t rows, int64_t width) {
  launch_for_each("add_row_broadcast", rows * width, AddPeriodicOp{out, x, row, width});
}

void relu_forward(float* y, const float* x, int64_t n) { launch_for_each("relu_forward", n, ReluForwardOp{y, x}); }

void relu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  launch_for_each("relu_backward", n, ReluBackwardOp{dx, dy, x, accumulate});
}

void silu_forward(float* y, const float* x, int64_t n) { launch_for_each("silu_forward", n, SiluForwardOp{y, x}); }

void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  launch_for_each("silu_backward", n, SiluBackwardOp{dx, dy, x, accumulate});
}

void gelu_forward(float* y, const float* x, int64_t n) { launch_for_each("gelu_forward", n, GeluForwardOp{y, x}); }

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  launch_for_each("gelu_backward", n, GeluBackwardOp{dx, dy, x, accumulate});
}

void gelu_tanh_forward(float* y, const float* x, int64_t n) {
  launch_for_each("gelu_tanh_forward", n, GeluTanhForwardOp{y, x});
}

void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  launch_for_each("gelu_tanh_backward", n, GeluTanhBackwardOp{dx, dy, x, accumulate});
}

void tanh_forward(float* y, const float* x, int64_t n) { launch_for_each("tanh_forward", n, TanhForwardOp{y, x}); }

void tanh_backward(float* dx, const float* dy, const float* y, int64_t n, bool accumulate) {
  launch_for_each("tanh_backward", n, TanhBackwardOp{dx, dy, y, accumulate});
}

void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset) {
  launch_for_each("dropout_forward", n, DropoutOp{y, x, p, 1.f / (1.f - p), seed, offset, false});
}

void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate) {
  launch_for_each("dropout_backward", n, DropoutOp{dx, dy, p, 1.f / (1.f - p), seed, offset, accumulate});
}

void column_sum_accumulate(float* out, const float* x, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  cudaStream_t stream = qkv::cuda::current_stream();
  // About 64 rows per row split, at most 128 splits: enough blocks to fill the GPU for tall x.
  const int64_t splits = std::min<int64_t>(128, (rows + 63) / 64);
  Scratch partial(static_cast<size_t>(splits * cols) * sizeof(float), stream);
  const dim3 grid(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols), static_cast<unsigned>(splits));
  column_partials_kernel<<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(partial.as<float>(), x, rows, cols);
  QKV_CUDA_CHECK_LAUNCH("column_sum_accumulate (partials)");
  add_partials_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(out, partial.as<float>(), splits, cols);
  QKV_CUDA_CHECK_LAUNCH("column_sum_accumulate (total)");
  partial.release();
}

void broadcast_rows(float* out, const float* row, int64_t rows, int64_t cols) {
  launch_for_each("broadcast_rows", rows * cols, BroadcastRowsOp{out, row, cols});
}

void keep_mask(int32_t* out, const int32_t* ids, int64_t n, int32_t pad_id) {
  launch_for_each("keep_mask", n, KeepMaskOp{out, ids, pad_id});
}

// out[b, t, :] = x[b, t, :] + table[t, :]: the table repeats every T * D elements.
void add_positional(float* out, const float* x, const float* table, int64_t B, int64_t T, int64_t D) {
  launch_for_each("add_positional", B * T * D, AddPeriodicOp{out, x, table, T * D});
}

void fill(float* out, float value, int64_t n) { launch_for_each("fill", n, FillOp{out, value}); }

double sum_of_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  cudaStream_t stream = qkv::cuda::current_stream();
  const unsigned blocks = std::min(blocks_for(n), 1024u);
  Scratch partial(static_cast<size_t>(blocks + 1) * sizeof(double), stream);  // [blocks] partials, then the total
  double* total = partial.as<double>() + blocks;
  sum_squares_partials_kernel<<<blocks, kThreads, 0, stream>>>(partial.as<double>(), x, n);
  QKV_CUDA_CHECK_LAUNCH("sum_of_squares (partials)");
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(total, partial.as<double>(), blocks);
  QKV_CUDA_CHECK_LAUNCH("sum_of_squares (total)");
  double result = 0.0;
  QKV_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, stream));
  partial.release();
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

double sum_of_squares_many(const std::vector<std::pair<const float*, int64_t>>& arrays) {
  // Every array's partials, then one total per array added in order into totals[i]; one wait for
  // all (clip_grad_norm over a model's parameters: one synchronisation a step, not one per tensor).
  cudaStream_t stream = qkv::cuda::current_stream();
  const size_t count = arrays.size();
  if (count == 0) return 0.0;
  Scratch totals(count * sizeof(double), stream);
  QKV_CUDA_CHECK(cudaMemsetAsync(totals.as<double>(), 0, count * sizeof(double), stream));
  for (size_t i = 0; i < count; ++i) {
    const auto [x, n] = arrays[i];
    if (n <= 0) continue;
    const unsigned blocks = std::min(blocks_for(n), 1024u);
    Scratch partial(static_cast<size_t>(blocks) * sizeof(double), stream);
    sum_squares_partials_kernel<<<blocks, kThreads, 0, stream>>>(partial.as<double>(), x, n);
    QKV_CUDA_CHECK_LAUNCH("sum_of_squares_many (partials)");
    sum_partials_kernel<<<1, kThreads, 0, stream>>>(totals.as<double>() + i, partial.as<double>(), blocks);
    QKV_CUDA_CHECK_LAUNCH("sum_of_squares_many (total)");
    partial.release();
  }
  std::vector<double> host(count);
  QKV_CUDA_CHECK(cudaMemcpyAsync(host.data(), totals.as<double>(), count * sizeof(double), cudaMemcpyDeviceToHost,
                                 stream));
  totals.release();
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  double sum = 0.0;
  for (double t : host) sum += t;  // in order, as the CPU adds the tensors' sums
  return sum;
}

}  // namespace qkv::kernels::cuda
