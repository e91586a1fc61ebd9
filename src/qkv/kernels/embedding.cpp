#include "qkv/kernels/embedding.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace qkv::kernels {

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static) if (N * D > 32768)
  for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * D, table + static_cast<int64_t>(ids[n]) * D, D * 4);
}

void embedding_forward_bf16(float* out, const bfloat16* table, const int32_t* ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static) if (N * D > 32768)
  for (int64_t n = 0; n < N; ++n) {
    const bfloat16* row = table + static_cast<int64_t>(ids[n]) * D;
    for (int64_t d = 0; d < D; ++d) out[n * D + d] = bf16_to_f32(row[d]);
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t D) {
#pragma omp parallel if (N * D > 32768)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (D + nt - 1) / nt;
    const int64_t c0 = std::min(D, t * per), c1 = std::min(D, c0 + per);
    for (int64_t n = 0; n < N; ++n) {
      float* dst = dtable + static_cast<int64_t>(ids[n]) * D;
      const float* src = dout + n * D;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace qkv::kernels
