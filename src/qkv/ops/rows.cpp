#include "qkv/kernels/cuda/kernels.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

void check_rows(const std::vector<int64_t>& rows, int64_t n, const char* what) {
  for (int64_t r : rows) QKV_CHECK(r >= 0 && r < n, what << ": row " << r << " outside [0, " << n << ")");
}

// One launch on a GPU: row i of `out` = row rows[i] of `in`, `count` elements of each of a row's
// `segments` segments `stride` apart.
void copy_rows_on_gpu(Tensor& out, const Tensor& in, const std::vector<int64_t>& rows, int64_t segments,
                      int64_t stride, int64_t count) {
  if constexpr (cuda::kBuilt)
    kernels::cuda::copy_rows(out.raw_data(), in.raw_data(), rows.data(), static_cast<int64_t>(rows.size()), segments,
                             stride, count, in.element_size());
}

}  // namespace

Tensor gather_rows(const Tensor& in_any, const std::vector<int64_t>& rows) {
  const Tensor in = in_any.contiguous();
  check_rows(rows, in.size(0), "gather_rows");
  Dims shape = in.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, in.dtype(), in.device());
  if (on_cuda(in)) {
    const int64_t row = in.size(0) > 0 ? in.numel() / in.size(0) : 0;
    copy_rows_on_gpu(out, in, rows, 1, row, row);
    return out;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i);
    out.slice0(r, r + 1).copy_from(in.slice0(rows[i], rows[i] + 1));
  }
  return out;
}

Tensor gather_cache_rows(const Tensor& cache, const std::vector<int64_t>& rows, int64_t length) {
  QKV_CHECK(cache.dim() == 4 && cache.is_contiguous(),
            "gather_cache_rows: expected a contiguous (N, H, capacity, dk) cache, got " << cache.describe());
  const int64_t H = cache.size(1), capacity = cache.size(2), dk = cache.size(3);
  QKV_CHECK(length >= 0 && length <= capacity, "gather_cache_rows: length " << length << " past capacity " << capacity);
  check_rows(rows, cache.size(0), "gather_cache_rows");
  Tensor out = Tensor::empty(Dims{static_cast<int64_t>(rows.size()), H, capacity, dk}, cache.dtype(), cache.device());
  if (on_cuda(cache)) {
    copy_rows_on_gpu(out, cache, rows, H, capacity * dk, length * dk);
    return out;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i);
    out.slice0(r, r + 1).narrow(2, 0, length).copy_from(cache.slice0(rows[i], rows[i] + 1).narrow(2, 0, length));
  }
  return out;
}

}  // namespace qkv::ops
