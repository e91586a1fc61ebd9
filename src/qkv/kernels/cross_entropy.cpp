#include "qkv/kernels/cross_entropy.h"

#include <cmath>

namespace qkv::kernels {

double cross_entropy_forward(float* lse, float* row_loss, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V, int32_t ignore_index, float label_smoothing, int64_t* valid) {
  double total = 0;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, count) if (N * V > 32768)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float mx = x[0];
    for (int64_t c = 1; c < V; ++c) mx = x[c] > mx ? x[c] : mx;
    double sum = 0, sum_x = 0;
    for (int64_t c = 0; c < V; ++c) {
      sum += std::exp(static_cast<double>(x[c] - mx));
      sum_x += x[c];
    }
    const double l = mx + std::log(sum);
    lse[n] = static_cast<float>(l);
    double loss = 0;
    if (targets[n] != ignore_index) {
      const double nll = l - x[targets[n]];
      const double smooth = V * l - sum_x;
      loss = (1.0 - label_smoothing) * nll + (label_smoothing / V) * smooth;
      total += loss;
      count += 1;
    }
    if (row_loss) row_loss[n] = static_cast<float>(loss);
  }
  *valid = count;
  return total;
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            int64_t N, int64_t V, int32_t ignore_index, float label_smoothing, float scale) {
  const float uniform = label_smoothing / static_cast<float>(V);
#pragma omp parallel for schedule(static) if (N * V > 32768)
  for (int64_t n = 0; n < N; ++n) {
    float* g = dlogits + n * V;
    if (targets[n] == ignore_index) {
      for (int64_t c = 0; c < V; ++c) g[c] = 0.f;
      continue;
    }
    const float* x = logits + n * V;
    for (int64_t c = 0; c < V; ++c) g[c] = scale * (std::exp(x[c] - lse[n]) - uniform);
    g[targets[n]] -= scale * (1.f - label_smoothing);
  }
}

}  // namespace qkv::kernels
