// head_tile.h on AVX-512, built with -mavx512f (cmake/qkv_isa_sources.cmake); handed out only at
// Isa::Avx512 and above. Internal linkage for all but the entry point (as wide_tile_avx512.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "qkv/kernels/head_tile.h"

#if !defined(__AVX512F__)
#error "head_tile_avx512.cpp must be compiled with -mavx512f"
#endif

namespace qkv::kernels::head_tile {

namespace {

constexpr int kRows = 6;

// Rows x (16 Vecs) of C: row r of op(A) is a[r * row_step + k * k_step]. The accumulators are a
// local array indexed by constants only (the loops unroll), which GCC keeps in registers:
// Rows x Vecs <= 24 of the 32.
template <int Rows, int Vecs>
void tile(const float* a, int64_t row_step, int64_t k_step, const float* B, int64_t ldb, int64_t K, __mmask16 last,
          float alpha, float beta, float* C, int64_t ldc) {
  __m512 acc[Rows][Vecs];
#pragma GCC unroll 6
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[Vecs];
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v)
      b[v] = _mm512_maskz_loadu_ps(v + 1 < Vecs ? __mmask16{0xffff} : last, B + k * ldb + 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * row_step + k * k_step]);
#pragma GCC unroll 4
      for (int v = 0; v < Vecs; ++v) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  // gemm_blocked's store: alpha multiplied in unless 1 (1 * x is x), then beta * C added by an FMA.
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v) {
      const __mmask16 m = v + 1 < Vecs ? __mmask16{0xffff} : last;
      float* c = C + r * ldc + 16 * v;
      __m512 out = acc[r][v];
      if (alpha != 1.f) out = _mm512_mul_ps(va, out);
      if (beta != 0.f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), out);
      _mm512_mask_storeu_ps(c, m, out);
    }
}

template <int Vecs>
void rows_of(int rows, const float* a, int64_t row_step, int64_t k_step, const float* B, int64_t ldb, int64_t K,
             __mmask16 last, float alpha, float beta, float* C, int64_t ldc) {
  switch (rows) {
    case 1: return tile<1, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
    case 2: return tile<2, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
    case 3: return tile<3, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
    case 4: return tile<4, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
    case 5: return tile<5, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
    default: return tile<6, Vecs>(a, row_step, k_step, B, ldb, K, last, alpha, beta, C, ldc);
  }
}

}  // namespace

void product_avx512_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int vecs = static_cast<int>((N + 15) / 16);
  const __mmask16 last = static_cast<__mmask16>((1u << (N - 16 * (vecs - 1))) - 1u);
  // Row i of op(A): A + i * lda along k (step 1), or column i of the stored A: A + i along k (step lda).
  const int64_t row_step = trans_a ? 1 : lda, k_step = trans_a ? lda : 1;
  for (int64_t i = 0; i < M; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, M - i));
    const float* a = A + i * row_step;
    float* c = C + i * ldc;
    switch (vecs) {
      case 1: rows_of<1>(rows, a, row_step, k_step, B, ldb, K, last, alpha, beta, c, ldc); break;
      case 2: rows_of<2>(rows, a, row_step, k_step, B, ldb, K, last, alpha, beta, c, ldc); break;
      case 3: rows_of<3>(rows, a, row_step, k_step, B, ldb, K, last, alpha, beta, c, ldc); break;
      default: rows_of<4>(rows, a, row_step, k_step, B, ldb, K, last, alpha, beta, c, ldc); break;
    }
  }
}

}  // namespace qkv::kernels::head_tile
