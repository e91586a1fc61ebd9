#include "qkv/kernels/packed_gemm.h"

#include "qkv/kernels/micro_tile.h"
#include "qkv/kernels/product_clock.h"
#include "qkv/kernels/weight_alloc.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace qkv::kernels {

namespace {

constexpr int64_t kPackedPanel = PackedWeights::kPanel;
constexpr int kPackedRows = tile::kRows;
static_assert(kPackedPanel == tile::kCols);
// Below this many multiply-adds one thread does the product: forking costs a few microseconds.
constexpr int64_t kPackedParallelMin = 1 << 16;

// C[0..Rows) x [0..cols) of one panel: the full K sum is kept in registers and C is written once,
// with the bias added.
template <int Rows>
void micro_kernel(const float* A, int64_t lda, const float* panel, int64_t K, const float* bias16, float* C,
                  int64_t ldc, int64_t cols) {
  const float* a[Rows];
  for (int r = 0; r < Rows; ++r) a[r] = A + r * lda;
  tile::Acc acc = tile::splat(_mm256_loadu_ps(bias16), _mm256_loadu_ps(bias16 + 8));
  tile::accumulate<Rows>(a, 1, panel, K, acc);
  for (int r = 0; r < Rows; ++r) {
    if (cols == kPackedPanel) {
      _mm256_storeu_ps(C + r * ldc, acc.lo[r]);
      _mm256_storeu_ps(C + r * ldc + 8, acc.hi[r]);
    } else {
      alignas(32) float tmp[kPackedPanel];
      _mm256_store_ps(tmp, acc.lo[r]);
      _mm256_store_ps(tmp + 8, acc.hi[r]);
      std::memcpy(C + r * ldc, tmp, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// One row (batch-1 decoding): the same sum over k, in the same order, as each row of micro_kernel
// (so a row's result does not depend on how many rows share the call), without its five idle rows.
// The loop is bound by the FMA latency, 4 cycles per 64-byte line of the panel: faster than memory
// delivers the panel, which the prefetch asks for 8 lines ahead.
void micro_kernel_one_row(const float* a, const float* panel, int64_t K, const float* bias16, float* C,
                          int64_t cols) {
  __m256 c0 = _mm256_loadu_ps(bias16), c1 = _mm256_loadu_ps(bias16 + 8);
  for (int64_t k = 0; k < K; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + (k + 8) * kPackedPanel), _MM_HINT_T0);
    const __m256 x = _mm256_broadcast_ss(a + k);
    c0 = _mm256_fmadd_ps(x, _mm256_load_ps(panel + k * kPackedPanel), c0);
    c1 = _mm256_fmadd_ps(x, _mm256_load_ps(panel + k * kPackedPanel + 8), c1);
  }
  if (cols == kPackedPanel) {
    _mm256_storeu_ps(C, c0);
    _mm256_storeu_ps(C + 8, c1);
  } else {
    alignas(32) float tmp[kPackedPanel];
    _mm256_store_ps(tmp, c0);
    _mm256_store_ps(tmp + 8, c1);
    std::memcpy(C, tmp, static_cast<size_t>(cols) * sizeof(float));
  }
}

// Rows [i0, i1) against one panel. The panel (K x 16 floats: 24 KB at K = 384) stays in L1 while
// the rows' 6-row tiles stream past it from L2.
void panel_product(const float* A, int64_t i0, int64_t i1, int64_t lda, const PackedWeights& W, int64_t p,
                   const float* bias, float* C, int64_t ldc) {
  const int64_t col0 = p * kPackedPanel, cols = std::min(kPackedPanel, W.out_features() - col0);
  alignas(32) float bias16[kPackedPanel] = {};
  if (bias) std::memcpy(bias16, bias + col0, static_cast<size_t>(cols) * sizeof(float));
  const int64_t K = W.in_features();
  const float* panel = W.panel(p);
  for (int64_t i = i0; i < i1;) {
    const int rows = tile::rows_of_next_tile(i1 - i);
    const float* a = A + i * lda;
    float* c = C + i * ldc + col0;
    switch (rows) {
      case 1: micro_kernel_one_row(a, panel, K, bias16, c, cols); break;
      case 2: micro_kernel<2>(a, lda, panel, K, bias16, c, ldc, cols); break;
      case 3: micro_kernel<3>(a, lda, panel, K, bias16, c, ldc, cols); break;
      case 4: micro_kernel<4>(a, lda, panel, K, bias16, c, ldc, cols); break;
      case 5: micro_kernel<5>(a, lda, panel, K, bias16, c, ldc, cols); break;
      default: micro_kernel<6>(a, lda, panel, K, bias16, c, ldc, cols); break;
    }
    i += rows;
  }
}

// Rows [i0, i1) against panels p and p + 1 with the 6 x 32 tile (wide_tile.h): each element the
// bits panel_product gives it (from the bias, one FMA per k in k's order).
void panel_pair_product(wide_tile::PairAccumulate pair, const float* A, int64_t i0, int64_t i1, int64_t lda,
                        const PackedWeights& W, int64_t p, const float* bias, float* C, int64_t ldc) {
  const int64_t col0 = p * kPackedPanel, cols = std::min(2 * kPackedPanel, W.out_features() - col0);
  alignas(64) float bias32[2 * kPackedPanel] = {};
  if (bias) std::memcpy(bias32, bias + col0, static_cast<size_t>(cols) * sizeof(float));
  alignas(64) float sums[kPackedRows * 2 * kPackedPanel];
  for (int64_t i = i0; i < i1;) {
    const int rows = tile::rows_of_next_tile(i1 - i);
    const float* a[kPackedRows];
    for (int r = 0; r < rows; ++r) {
      a[r] = A + (i + r) * lda;
      std::memcpy(sums + r * 2 * kPackedPanel, bias32, sizeof bias32);
    }
    pair(rows, a, 1, W.panel(p), W.panel(p + 1), W.in_features(), sums);
    for (int r = 0; r < rows; ++r)
      std::memcpy(C + (i + r) * ldc + col0, sums + r * 2 * kPackedPanel, static_cast<size_t>(cols) * sizeof(float));
    i += rows;
  }
}

// Rows per block of A: a block (rows x K floats) is read once per panel, so it should stay in the
// core's L2 (512 KB here; half of it leaves room for the panels streaming through). Without blocks
// a product of thousands of rows re-read all of A from L3 for every panel: 155 GFLOP/s against
// 194 at M = 4096, K = 1536.
constexpr int64_t kPackedBlockBytes = 256 * 1024;

int64_t rows_per_block(int64_t K) {
  const int64_t rows = kPackedBlockBytes / (K * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(kPackedRows, rows / kPackedRows * kPackedRows);
}

}  // namespace

PackedWeights::PackedWeights(int64_t out_features, int64_t in_features) : out_(out_features), in_(in_features) {
  owned_.reset(static_cast<float*>(
      allocate_weights(static_cast<size_t>(storage_floats(out_features, in_features)) * sizeof(float))));
  data_ = owned_.get();
}

PackedWeights PackedWeights::view(const float* storage, int64_t out_features, int64_t in_features) {
  PackedWeights w;
  w.out_ = out_features;
  w.in_ = in_features;
  w.data_ = const_cast<float*>(storage);  // read only through the view: panel() is const
  return w;
}

PackedWeights pack_weights(const float* W, int64_t out_features, int64_t in_features) {
  PackedWeights packed(out_features, in_features);
  pack_weights_into(W, out_features, in_features, packed.data());
  return packed;
}

void pack_weights_into(const float* W, int64_t out_features, int64_t in_features, float* dst) {
  const int64_t K = in_features, panels = (out_features + kPackedPanel - 1) / kPackedPanel;
#pragma omp parallel for schedule(static) if (out_features * in_features > kPackedParallelMin)
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = dst + p * K * kPackedPanel;
    for (int64_t j = 0; j < kPackedPanel; ++j) {
      const int64_t o = p * kPackedPanel + j;
      if (o < out_features) {
        const float* row = W + o * in_features;
        for (int64_t k = 0; k < K; ++k) panel[k * kPackedPanel + j] = row[k];
      } else {
        for (int64_t k = 0; k < K; ++k) panel[k * kPackedPanel + j] = 0.f;
      }
    }
  }
}

void gemm_packed(const float* A, int64_t M, int64_t lda, const PackedWeights& W, const float* bias_or_null,
                 float* C, int64_t ldc) {
  gemm_packed_with_tile(wide_tile::chosen_or_null(), A, M, lda, W, bias_or_null, C, ldc);
}

void gemm_packed_with_tile(wide_tile::PairAccumulate pair, const float* A, int64_t M, int64_t lda,
                           const PackedWeights& W, const float* bias_or_null, float* C, int64_t ldc) {
  if (M <= 0 || W.out_features() <= 0) return;
  const product_clock::Scope clock("f32", M, W.out_features(), W.in_features(), false, true);
  const int64_t work = M * W.out_features() * W.in_features();
  const int64_t block = rows_per_block(W.in_features()), panels = W.panels();
  // Threads split the panels (output columns) of each row block: a thread reads only its own part
  // of the weights, the same part in every block, and at decode sizes there are far more panels
  // (16 to 500) than row tiles (1 to 22). Blocks write disjoint rows, so no barrier between them.
  // Every element is one micro-kernel's full sum over K whatever the blocking: the bits of a row do
  // not depend on M.
#pragma omp parallel if (work > kPackedParallelMin)
  for (int64_t i0 = 0; i0 < M; i0 += block) {
    const int64_t i1 = std::min(M, i0 + block);
    if (pair) {  // two panels at a time; an odd count's last one alone
#pragma omp for schedule(static) nowait
      for (int64_t p = 0; p < panels; p += 2) {
        if (p + 1 < panels) panel_pair_product(pair, A, i0, i1, lda, W, p, bias_or_null, C, ldc);
        else panel_product(A, i0, i1, lda, W, p, bias_or_null, C, ldc);
      }
      continue;
    }
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < panels; ++p) panel_product(A, i0, i1, lda, W, p, bias_or_null, C, ldc);
  }
}

}  // namespace qkv::kernels
