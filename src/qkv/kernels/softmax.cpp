#include "qkv/kernels/softmax.h"

#include <cmath>
#include <limits>

#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {

namespace {

// row[c] = exp(row[c] - mx) for the 8-lane part of the row; returns their sum's lanes.
template <__m256 (*Exp)(__m256)>
__m256 exp_of_shifted(float* row, int64_t C, float mx) {
  const __m256 shift = simd::splat(mx);
  __m256 sum8 = _mm256_setzero_ps();
  for (int64_t c = 0; c + 8 <= C; c += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(row + c), shift));
    _mm256_storeu_ps(row + c, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  return sum8;
}

}  // namespace

void softmax_row(float* row, int64_t C) {
  __m256 m = simd::splat(-std::numeric_limits<float>::infinity());
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + c));
  float mx = simd::max_lanes(m);
  for (; c < C; ++c) mx = row[c] > mx ? row[c] : mx;
  // A row with masked scores (-1e9) takes exp_or_zero, whose lanes below -104 skip exp's underflowing
  // multiplications (slow on the CPUs measured); a row without any keeps exp, about 15% cheaper. Both
  // give the same bits, so the test need not be exact: padding, causal masks and left-padded prompts
  // all mask an end of the row.
  const bool has_zeros =
      C > 0 && (row[0] - mx < simd::kExpIsZeroBelow || row[C - 1] - mx < simd::kExpIsZeroBelow);
  const __m256 sum8 = has_zeros ? exp_of_shifted<simd::exp_or_zero>(row, C, mx) : exp_of_shifted<simd::exp>(row, C, mx);
  float sum = simd::sum_lanes(sum8);
  for (c = C / 8 * 8; c < C; ++c) {
    // Padding keys sit at the row's end, here: as exp_or_zero, a result that rounds to 0 is not computed.
    const float x = row[c] - mx;
    row[c] = has_zeros && x < simd::kExpIsZeroBelow ? 0.f : std::exp(x);
    sum += row[c];
  }
  const __m256 inv = simd::splat(1.f / sum);
  for (c = 0; c + 8 <= C; c += 8) _mm256_storeu_ps(row + c, _mm256_mul_ps(_mm256_loadu_ps(row + c), inv));
  for (; c < C; ++c) row[c] *= 1.f / sum;
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
