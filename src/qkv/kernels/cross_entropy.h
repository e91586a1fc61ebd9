// Fused log-softmax + cross-entropy over logits (N, V) with an ignored target id and label smoothing,
// with PyTorch's definition (nn.CrossEntropyLoss, reduction='mean'):
//   lse_n    = log sum_c exp(x_nc)
//   nll_n    = lse_n - x_n,y_n
//   smooth_n = sum_c (lse_n - x_nc) = V * lse_n - sum_c x_nc
//   loss     = sum_{n valid} [(1 - eps) nll_n + (eps / V) smooth_n] / count_valid
#pragma once
#include <cstdint>

namespace qkv::kernels {

// Writes lse (N) for backward and, if row_loss is not null, each row's unreduced loss (0 if ignored).
// Returns the sum of valid rows' losses; *valid gets the number of valid rows.
double cross_entropy_forward(float* lse, float* row_loss, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V, int32_t ignore_index, float label_smoothing, int64_t* valid);

// d loss / d x_nc = scale * (softmax_nc - (1 - eps) [c == y_n] - eps / V) for valid rows, 0 otherwise,
// with scale = dloss / count_valid. dlogits is written.
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            int64_t N, int64_t V, int32_t ignore_index, float label_smoothing, float scale);

}  // namespace qkv::kernels
