// Each row's highest scores with their ids (a search step's candidates), on the tensor's device.
#include <algorithm>
#include <limits>
#include <vector>

#include "qkv/kernels/cuda/kernels.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

int64_t max_top_of_rows() { return kernels::cuda::kMaxTopOfRows; }

std::pair<Tensor, Tensor> top_of_rows(const Tensor& x_in, int64_t count) {
  QKV_CHECK(x_in.dtype() == DType::F32 && x_in.dim() == 2, "top_of_rows: expected (N, V) f32, got " << x_in.describe());
  QKV_CHECK(count >= 1 && count <= max_top_of_rows(),
            "top_of_rows: count " << count << " outside [1, " << max_top_of_rows() << "]");
  const Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), V = x.size(1);
  Tensor values = empty_like_device(Dims{N, count}, x), ids = empty_like_device(Dims{N, count}, x, DType::I32);
  if (on_cuda(x)) {
    if constexpr (cuda::kBuilt)
      kernels::cuda::top_of_rows(x.f32(), N, V, static_cast<int>(count), values.f32(), ids.i32());
    return {values, ids};
  }
  // The reference: a partial sort by (score descending, id ascending) of the entries above -inf.
  std::vector<int32_t> order;
  for (int64_t i = 0; i < N; ++i) {
    const float* row = x.f32() + i * V;
    order.clear();
    for (int64_t c = 0; c < V; ++c)
      if (row[c] > -std::numeric_limits<float>::infinity()) order.push_back(static_cast<int32_t>(c));
    const auto taken = static_cast<std::ptrdiff_t>(std::min<size_t>(order.size(), static_cast<size_t>(count)));
    std::partial_sort(order.begin(), order.begin() + taken, order.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t j = 0; j < count; ++j) {
      const bool found = j < taken;
      values.f32()[i * count + j] = found ? row[order[j]] : -std::numeric_limits<float>::infinity();
      ids.i32()[i * count + j] = found ? order[j] : -1;
    }
  }
  return {values, ids};
}

}  // namespace qkv::ops
