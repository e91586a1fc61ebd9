#include "qkv/kernels/adam.h"

#include <cmath>

namespace qkv::kernels {

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamScalars& s) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (s.weight_decay != 0.f) g = g + s.weight_decay * param[i];
    m[i] = m[i] * s.beta1 + s.one_minus_beta1 * g;
    v[i] = v[i] * s.beta2 + s.one_minus_beta2 * (g * g);
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
    param[i] = param[i] + (-s.step_size) * (m[i] / denom);
  }
}

}  // namespace qkv::kernels
