#include "qkv/kernels/dropout.h"

#include <algorithm>

#include "qkv/kernels/dropout_isa.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/dropout_lanes.h"

namespace qkv::kernels {

namespace dropout_isa {

RowKernel avx2() { return dropout_row_lanes; }

RowKernel avx512dq_or_null() {
  return isa_enabled(Isa::Avx512) ? avx512dq_unchecked() : nullptr;
}

RowKernel chosen() {
  static const RowKernel kernel = avx512dq_or_null() ? avx512dq_or_null() : avx2();
  return kernel;
}

}  // namespace dropout_isa

void dropout_row(float* out, const float* in, int64_t n, float p, uint64_t seed, uint64_t counter) {
  dropout_isa::chosen()(out, in, n, p, seed, counter);
}

namespace {
// Elements per OpenMP chunk of dropout_forward / _backward, and the size below which one thread
// does the whole loop (fork and join cost more).
constexpr int64_t kChunk = 4096;
constexpr int64_t kDropoutParallelMin = 1 << 12;
}  // namespace

void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kDropoutParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk;
    dropout_row(y + i, x + i, std::min(kChunk, n - i), p, seed, offset + static_cast<uint64_t>(i));
  }
}

void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kDropoutParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
    if (!accumulate) {
      dropout_row(dx + i, dy + i, len, p, seed, offset + static_cast<uint64_t>(i));
      continue;
    }
    alignas(32) float g[kChunk];
    dropout_row(g, dy + i, len, p, seed, offset + static_cast<uint64_t>(i));
    for (int64_t j = 0; j < len; ++j) dx[i + j] += g[j];
  }
}

}  // namespace qkv::kernels
