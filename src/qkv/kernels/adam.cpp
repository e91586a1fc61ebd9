#include "qkv/kernels/adam.h"

#include <immintrin.h>

#include <cmath>

namespace qkv::kernels {
namespace {

// The step's rounding, written out (the scalar loop it replaces had the compiler fuse the same
// products into FMAs; the loop itself stayed scalar, reloading every constant and calling sqrtf's
// errno path):
//   p' = p * param_scale (AdamW's decay, skipped at 1);  g' = fma(wd, p', g)
//   m = fma(m, beta1, g' (1 - beta1));  v = fma(v, beta2, g'^2 (1 - beta2))
//   p = p' - step_size * (m / (sqrt(v) / bias_correction2_sqrt + eps)), rounded once (an FMA)
// Eight lanes and one lane give each element the same operations, so the same bits.
inline void adam_scalar(float* param, const float* grad, float* m, float* v, int64_t i, const AdamScalars& s) {
  const float p = s.param_scale != 1.f ? param[i] * s.param_scale : param[i];
  float g = grad[i];
  if (s.weight_decay != 0.f) g = std::fma(s.weight_decay, p, g);
  m[i] = std::fma(m[i], s.beta1, g * s.one_minus_beta1);
  v[i] = std::fma(v[i], s.beta2, (g * g) * s.one_minus_beta2);
  const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
  param[i] = std::fma(-s.step_size, m[i] / denom, p);
}

struct AdamLanes {
  __m256 beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps, weight_decay,
      param_scale;
  bool decay, scale;
  explicit AdamLanes(const AdamScalars& s)
      : beta1(_mm256_set1_ps(s.beta1)),
        one_minus_beta1(_mm256_set1_ps(s.one_minus_beta1)),
        beta2(_mm256_set1_ps(s.beta2)),
        one_minus_beta2(_mm256_set1_ps(s.one_minus_beta2)),
        step_size(_mm256_set1_ps(s.step_size)),
        bias_correction2_sqrt(_mm256_set1_ps(s.bias_correction2_sqrt)),
        eps(_mm256_set1_ps(s.eps)),
        weight_decay(_mm256_set1_ps(s.weight_decay)),
        param_scale(_mm256_set1_ps(s.param_scale)),
        decay(s.weight_decay != 0.f),
        scale(s.param_scale != 1.f) {}

  // Elements [i, i + 8).
  void step(float* param, const float* grad, float* m, float* v, int64_t i) const {
    __m256 p = _mm256_loadu_ps(param + i);
    if (scale) p = _mm256_mul_ps(p, param_scale);
    __m256 g = _mm256_loadu_ps(grad + i);
    if (decay) g = _mm256_fmadd_ps(weight_decay, p, g);
    const __m256 m1 = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), beta1, _mm256_mul_ps(g, one_minus_beta1));
    const __m256 v1 =
        _mm256_fmadd_ps(_mm256_loadu_ps(v + i), beta2, _mm256_mul_ps(_mm256_mul_ps(g, g), one_minus_beta2));
    _mm256_storeu_ps(m + i, m1);
    _mm256_storeu_ps(v + i, v1);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v1), bias_correction2_sqrt), eps);
    _mm256_storeu_ps(param + i, _mm256_fnmadd_ps(step_size, _mm256_div_ps(m1, denom), p));
  }
};

}  // namespace

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamScalars& s) {
  const AdamLanes lanes(s);
  const int64_t vectors = n / 8;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t q = 0; q < vectors; ++q) lanes.step(param, grad, m, v, q * 8);
  for (int64_t i = vectors * 8; i < n; ++i) adam_scalar(param, grad, m, v, i, s);
}

}  // namespace qkv::kernels
