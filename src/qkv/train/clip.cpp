#include "qkv/train/clip.h"

#include <cmath>

#include "qkv/ops/ops.h"

namespace qkv::train {

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  std::vector<Tensor> grads;
  for (const Var& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  const double norm = std::sqrt(ops::sum_of_squares(grads));
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
