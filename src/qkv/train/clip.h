// Gradient-norm clipping as torch.nn.utils.clip_grad_norm_: with N the L2 norm of all gradients
// together, every gradient is scaled by max_norm / (N + 1e-6) when that is below 1.
#pragma once
#include <vector>

#include "qkv/autograd/var.h"

namespace qkv::train {

// Returns N (before clipping). max_norm <= 0 only measures. Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Var>& params, double max_norm);

}  // namespace qkv::train
