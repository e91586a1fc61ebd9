#include "qkv/ops/ops.h"

namespace qkv::ops {

Tensor gather_rows(const Tensor& in_any, const std::vector<int64_t>& rows) {
  const Tensor in = in_any.contiguous();
  Dims shape = in.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, in.dtype(), in.device());  // on a GPU, a copy per row
  for (size_t i = 0; i < rows.size(); ++i) {
    QKV_CHECK(rows[i] >= 0 && rows[i] < in.size(0), "gather_rows: row " << rows[i] << " outside [0, " << in.size(0) << ")");
    const int64_t r = static_cast<int64_t>(i);
    out.slice0(r, r + 1).copy_from(in.slice0(rows[i], rows[i] + 1));
  }
  return out;
}

}  // namespace qkv::ops
