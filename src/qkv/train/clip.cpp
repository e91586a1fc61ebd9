#include "qkv/train/clip.h"

#include <cmath>

#include "qkv/kernels/elementwise.h"

namespace qkv::train {

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  double sq = 0;
  for (const Var& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const float* d = g.f32();
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (g.numel() > 65536)
    for (int64_t i = 0; i < g.numel(); ++i) s += static_cast<double>(d[i]) * d[i];
    sq += s;
  }
  const double norm = std::sqrt(sq);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
      for (const Var& p : params)
        if (p.grad().defined()) {
          Tensor g = p.grad();
          kernels::scale(g.f32(), g.f32(), static_cast<float>(coef), g.numel());
        }
  }
  return norm;
}

}  // namespace qkv::train
