#include "qkv/nn/position_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace qkv::nn {

int32_t relative_position_bucket(int64_t offset, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0, distance = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (offset > 0) bucket += num_buckets;
    distance = std::abs(offset);
  } else {
    distance = offset < 0 ? -offset : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (distance < max_exact) return static_cast<int32_t>(bucket + distance);
  // torch: log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets -
  // max_exact), each step in float32 (the Python float is rounded to float32 by the tensor op),
  // truncated by .to(torch.long).
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float log_range = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(num_buckets - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(scaled);
  return static_cast<int32_t>(bucket + std::min(large, num_buckets - 1));
}

RelativePositionBias::RelativePositionBias(int64_t num_buckets, int64_t max_distance, int64_t num_heads,
                                           int64_t d_model, bool bidirectional, Generator& gen)
    : Embedding(num_buckets, num_heads, gen),
      num_buckets_(num_buckets),
      max_distance_(max_distance),
      bidirectional_(bidirectional) {
  if (random_init_skipped()) return;
  // Embedding drew N(0, 1); T5 draws this table with standard deviation d_model^-1/2.
  ops::scale_inplace(weight.value(), 1.f / std::sqrt(static_cast<float>(d_model)));
}

Var RelativePositionBias::forward(int64_t query_start, int64_t Tq, int64_t Tk) const {
  std::vector<int32_t> buckets(static_cast<size_t>(Tq * Tk));
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j)
      buckets[static_cast<size_t>(i * Tk + j)] =
          relative_position_bucket(j - (query_start + i), bidirectional_, num_buckets_, max_distance_);
  Tensor ids = Tensor::from_ids(Dims{Tq, Tk}, buckets);
  const Device device = weight.value().device();
  if (!(device == Device::cpu())) ids = ids.to(device);
  return Embedding::forward(ids);  // (Tq, Tk, H)
}

}  // namespace qkv::nn
