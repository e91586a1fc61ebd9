#include "qkv/kernels/softmax.h"

#include <cmath>

namespace qkv::kernels {

void softmax_row(float* row, int64_t C) {
  float mx = row[0];
  for (int64_t c = 1; c < C; ++c) mx = row[c] > mx ? row[c] : mx;
  float sum = 0;
  for (int64_t c = 0; c < C; ++c) {
    row[c] = std::exp(row[c] - mx);
    sum += row[c];
  }
  const float inv = 1.f / sum;
  for (int64_t c = 0; c < C; ++c) row[c] *= inv;
}

void softmax_forward(float* y, const float* x, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c];
    softmax_row(y + r * C, C);
  }
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate) {
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * C;
    const float* dyr = dy + r * C;
    float dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += dyr[c] * yr[c];
    float* dxr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float v = yr[c] * (dyr[c] - dot);
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
  }
}

}  // namespace qkv::kernels
