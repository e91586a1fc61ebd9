#include "qkv/kernels/elementwise.h"

#include <cmath>

#include "qkv/kernels/random.h"

namespace qkv::kernels {

namespace {
// Below this many elements the OpenMP fork/join costs more than the loop.
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void scale(float* out, const float* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = s * x[i];
}

void axpy(float* acc, const float* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] += s * x[i];
}

void add_row_broadcast(float* out, const float* x, const float* row, int64_t rows, int64_t width) {
#pragma omp parallel for schedule(static) if (rows * width > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) out[r * width + c] = x[r * width + c] + row[c];
}

void relu_forward(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float g = x[i] > 0.f ? dy[i] : 0.f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

void gelu_forward(float* y, const float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
}

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) {
    float cdf = 0.5f * (1.f + std::erf(x[i] * kInvSqrt2));
    float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    float g = dy[i] * (cdf + x[i] * pdf);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void gelu_tanh_forward(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
}

void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], v2 = v * v;
    const float t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v2 * v));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v2);
    const float g = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const float keep_scale = 1.f / (1.f - p);
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) y[i] = dropout_keep(seed, offset + i, p) ? x[i] * keep_scale : 0.f;
}

void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate) {
  const float keep_scale = 1.f / (1.f - p);
#pragma omp parallel for schedule(static) if (n > kParallelMin / 8)
  for (int64_t i = 0; i < n; ++i) {
    float g = dropout_keep(seed, offset + i, p) ? dy[i] * keep_scale : 0.f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

}  // namespace qkv::kernels

namespace qkv::kernels {

void column_sum_accumulate(float* out, const float* x, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 64;  // each thread owns whole column blocks: no shared writes
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = c0 + kBlock < cols ? c0 + kBlock : cols;
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += x[r * cols + c];
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}

void broadcast_rows(float* out, const float* row, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = row[c];
}

}  // namespace qkv::kernels
