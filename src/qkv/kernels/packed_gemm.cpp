#include "qkv/kernels/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace qkv::kernels {

namespace {

constexpr int64_t kPanel = PackedWeights::kPanel;
// Rows per micro-kernel call. AVX2 has 16 vector registers: 6 rows x 2 vectors = 12 accumulators, plus
// the 2 panel vectors of the current k and 1 broadcast of A, leaves one spare. Each k then issues
// 12 FMAs for 2 panel loads and 6 broadcasts, enough to keep both FMA ports busy.
constexpr int kRows = 6;
// Below this many multiply-adds one thread does the product: forking costs a few microseconds.
constexpr int64_t kParallelMin = 1 << 16;

// C[0..R) x [0..16) of one panel: the full K sum is kept in registers and C is written once, with the
// bias added. Columns past `cols` (the zero-padded tail of the last panel) are not written.
template <int R>
void micro_kernel(const float* A, int64_t lda, const float* panel, int64_t K, const float* bias16, float* C,
                  int64_t ldc, int64_t cols) {
  __m256 acc[R][2];
  const __m256 b_lo = _mm256_loadu_ps(bias16), b_hi = _mm256_loadu_ps(bias16 + 8);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = b_lo, acc[r][1] = b_hi;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_load_ps(panel + k * kPanel), w1 = _mm256_load_ps(panel + k * kPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  if (cols == kPanel) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(C + r * ldc, acc[r][0]);
      _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
    }
    return;
  }
  alignas(32) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tmp, acc[r][0]);
    _mm256_store_ps(tmp + 8, acc[r][1]);
    std::memcpy(C + r * ldc, tmp, static_cast<size_t>(cols) * sizeof(float));
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t);
constexpr MicroKernel kKernels[kRows + 1] = {nullptr,          micro_kernel<1>, micro_kernel<2>, micro_kernel<3>,
                                             micro_kernel<4>, micro_kernel<5>, micro_kernel<6>};

// All M rows against one panel. The panel (K x 16 floats: 16 KB at K = 256) stays in L1 while the
// row blocks of A stream past it from L2, so the weights are read from memory once per product.
void panel_product(const float* A, int64_t M, int64_t lda, const PackedWeights& W, int64_t p, const float* bias,
                   float* C, int64_t ldc) {
  const int64_t col0 = p * kPanel, cols = std::min(kPanel, W.out_features() - col0);
  alignas(32) float bias16[kPanel] = {};
  if (bias) std::memcpy(bias16, bias + col0, static_cast<size_t>(cols) * sizeof(float));
  const int64_t K = W.in_features();
  for (int64_t i = 0; i < M; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, M - i));
    kKernels[rows](A + i * lda, lda, W.panel(p), K, bias16, C + i * ldc + col0, ldc, cols);
  }
}

}  // namespace

PackedWeights::PackedWeights(int64_t out_features, int64_t in_features) : out_(out_features), in_(in_features) {
  // aligned_alloc wants a size that is a multiple of the alignment; never zero bytes.
  size_t bytes = static_cast<size_t>(std::max<int64_t>(1, panels() * in_ * kPanel)) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  data_.reset(p);
}

PackedWeights pack_weights(const float* W, int64_t out_features, int64_t in_features) {
  PackedWeights packed(out_features, in_features);
  float* dst = packed.data();
  const int64_t K = in_features;
#pragma omp parallel for schedule(static) if (out_features * in_features > kParallelMin)
  for (int64_t p = 0; p < packed.panels(); ++p) {
    float* panel = dst + p * K * kPanel;
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t o = p * kPanel + j;
      if (o < out_features) {
        const float* row = W + o * in_features;
        for (int64_t k = 0; k < K; ++k) panel[k * kPanel + j] = row[k];
      } else {
        for (int64_t k = 0; k < K; ++k) panel[k * kPanel + j] = 0.f;
      }
    }
  }
  return packed;
}

void gemm_packed(const float* A, int64_t M, int64_t lda, const PackedWeights& W, const float* bias_or_null,
                 float* C, int64_t ldc) {
  if (M <= 0 || W.out_features() <= 0) return;
  const int64_t work = M * W.out_features() * W.in_features();
  // Threads split the panels (output columns): each thread reads only its own part of the weights,
  // and at decode sizes there are far more panels (16 to 500) than rows blocks (1 to 22).
#pragma omp parallel for schedule(static) if (work > kParallelMin)
  for (int64_t p = 0; p < W.panels(); ++p) panel_product(A, M, lda, W, p, bias_or_null, C, ldc);
}

}  // namespace qkv::kernels
