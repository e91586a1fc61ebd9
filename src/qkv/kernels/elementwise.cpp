#include "qkv/kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/dtype.h"
#include "qkv/kernels/map_lanes.h"
#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {

namespace {
// Below this many elements the OpenMP fork/join costs more than the loop.
constexpr int64_t kElementwiseParallelMin = 1 << 15;
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void mul(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void mul_backward(float* d, const float* dy, const float* other, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = accumulate ? d[i] + dy[i] * other[i] : dy[i] * other[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void scale(float* out, const float* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = s * x[i];
}

void axpy(float* acc, const float* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] += s * x[i];
}

void add_row_broadcast(float* out, const float* x, const float* row, int64_t rows, int64_t width) {
#pragma omp parallel for schedule(static) if (rows * width > kElementwiseParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) out[r * width + c] = x[r * width + c] + row[c];
}

// max(x, +0) returns its second operand for NaN and for -0, as x > 0 ? x : 0 does.
void relu_forward(float* y, const float* x, int64_t n) {
  map8(y, x, n, [](__m256 v) { return _mm256_max_ps(v, _mm256_setzero_ps()); });
}

void relu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > kElementwiseParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float g = x[i] > 0.f ? dy[i] : 0.f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

// SiLU's lanes use simd::exp (1.2 ulp) instead of libm's expf one value at a time: as a scalar loop
// SiLU took 5.4% of a Marian translation (a 2,048-wide feed-forward per decoder layer and step).
// x / (1 + e^-x) as PyTorch's CPU kernel computes it; e^-x overflows to inf below x = -88.72, as
// libm's does, and the result there is -0 on both.
namespace {
__m256 one_plus_exp_minus(__m256 x) {
  return _mm256_add_ps(simd::splat(1.f), simd::exp(_mm256_xor_ps(x, simd::splat(-0.f))));
}
__m256 sigmoid_lanes(__m256 x) { return _mm256_div_ps(simd::splat(1.f), one_plus_exp_minus(x)); }
}  // namespace

void silu_forward(float* y, const float* x, int64_t n) {
  map8(y, x, n, [](__m256 v) { return _mm256_div_ps(v, one_plus_exp_minus(v)); });
}

// d/dx x s(x) = s (1 + x (1 - s)), s = sigmoid(x).
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  map8_grad(dx, dy, x, n, accumulate, [](__m256 v) {
    const __m256 s = sigmoid_lanes(v), one = simd::splat(1.f);
    return _mm256_mul_ps(s, _mm256_fmadd_ps(v, _mm256_sub_ps(one, s), one));
  });
}

// dropout_forward and dropout_backward: kernels/dropout.cpp (eight draws at a time).

}  // namespace qkv::kernels

namespace qkv::kernels {

void column_sum_accumulate(float* out, const float* x, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 64;  // each thread owns whole column blocks: no shared writes
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols > kElementwiseParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = c0 + kBlock < cols ? c0 + kBlock : cols;
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += x[r * cols + c];
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}

void broadcast_rows(float* out, const float* row, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kElementwiseParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = row[c];
}

}  // namespace qkv::kernels

namespace qkv::kernels {

void activation_backward_bf16_input(ActivationBackward backward, float* dx, const float* dy, const uint16_t* x,
                                    int64_t n, bool accumulate) {
  // A multiple of 8 (every chunk but the last holds whole lane blocks) and below kMapParallelMin, so
  // that `backward` runs on its thread without a region of its own.
  constexpr int64_t kChunk = 8192;
  static_assert(kChunk % 8 == 0 && kChunk <= kMapParallelMin);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel if (n > kMapParallelMin)
  {
    float wide[kChunk];
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t at = c * kChunk, len = std::min(kChunk, n - at);
      widen_bf16(x + at, len, wide);
      backward(dx + at, dy + at, wide, len, accumulate);
    }
  }
}

}  // namespace qkv::kernels
