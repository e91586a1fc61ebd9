#include "qkv/train/clip.h"

#include <cmath>

#include "qkv/ops/ops.h"

namespace qkv::train {

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  double sq = 0;
  for (const Var& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    sq += ops::sum_of_squares(g);
  }
  const double norm = std::sqrt(sq);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
      for (const Var& p : params)
        if (p.grad().defined()) {
          Tensor g = p.grad();
          ops::scale_inplace(g, static_cast<float>(coef));
        }
  }
  return norm;
}

}  // namespace qkv::train
