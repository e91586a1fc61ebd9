#include "qkv/kernels/log_softmax.h"

#include <cmath>
#include <limits>

#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {
namespace {

float row_max(const float* x, int64_t C) {
  __m256 m = simd::splat(-std::numeric_limits<float>::infinity());
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + c));
  float mx = simd::max_lanes(m);
  for (; c < C; ++c) mx = x[c] > mx ? x[c] : mx;
  return mx;
}

}  // namespace

float logsumexp_row(const float* x, int64_t C) {
  const float mx = row_max(x, C);
  if (std::isinf(mx) && mx < 0) return mx;  // every logit -inf (or C == 0)
  const __m256 shift = simd::splat(mx);
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    const __m256 e = simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + c), shift));
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum_lo, sum_hi));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; c < C; ++c) sum += std::exp(static_cast<double>(x[c] - mx));
  return mx + static_cast<float>(std::log(sum));
}

float log_softmax_row(float* x, int64_t C) {
  const float lse = logsumexp_row(x, C);
  const __m256 l = simd::splat(lse);
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) _mm256_storeu_ps(x + c, _mm256_sub_ps(_mm256_loadu_ps(x + c), l));
  for (; c < C; ++c) x[c] -= lse;
  return lse;
}

}  // namespace qkv::kernels
