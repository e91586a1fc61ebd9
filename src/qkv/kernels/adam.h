// One Adam step on a parameter array, in the order of PyTorch 1.13's single-tensor Adam so the
// float32 rounding matches:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once
#include <cstdint>

namespace qkv::kernels {

struct AdamScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;            // lr / (1 - beta1^t), computed in double and rounded
  float bias_correction2_sqrt;
  float eps;
  float weight_decay;         // L2 added to the gradient, as torch.optim.Adam (0 by default)
  // torch.optim.AdamW's decoupled decay, param.mul_(1 - lr * weight_decay) before the step: the
  // parameter is multiplied by this first (one rounding, as that separate pass did); 1 skips it.
  float param_scale = 1.f;
};

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamScalars& s);

}  // namespace qkv::kernels
