// gemm_bf16's AMX build (bf16_amx_blocking.h) on AMX-BF16's tiles (amx_tiles.h), compiled with the
// AMX and AVX512_BF16 flags (cmake/qkv_isa_sources.cmake); bf16_isa calls in here only at Isa::Amx.
// Packing and the epilogue are the avx512_bf16 build's vector code (bf16_pack_avx512.h).
#include <immintrin.h>

#include <cstring>

#include "qkv/kernels/amx_tiles.h"
#include "qkv/kernels/bf16_amx_blocking.h"
#include "qkv/kernels/bf16_pack_avx512.h"

namespace qkv::kernels::bf16_isa {

namespace {

using bf16_amx::kBlockRows;
using bf16_amx::kCols;
using blocking::Product;
using pack_avx512::first_n;

struct AmxMachine {
  amx::HardwareTiles<amx::Op::Bf16> tiles;

  // Rows [i0, i1) of op(A) as rows of `pairs` words (bf16_amx_blocking.h), the rest of the last
  // 32-row block zero.
  void pack_a_rows(const Product& p, int64_t i0, int64_t i1, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    const int64_t rows = bf16_amx::ceil_div(i1 - i0, kBlockRows) * kBlockRows;
    if (!p.trans_a) {
      const int64_t valid = std::min(kc, p.K - k0);
      for (int64_t i = i0; i < i1; ++i)
        pack_avx512::convert_row(p.A + i * p.lda + k0, valid, 2 * pairs, dst + (i - i0) * pairs);
      std::memset(dst + (i1 - i0) * pairs, 0, static_cast<size_t>((rows - (i1 - i0)) * pairs) * 4);
      return;
    }
    // A stored (K, M): rows k and k + 1 give the words of 16 rows of op(A) at pair kp, scattered
    // to those rows.
    std::memset(dst, 0, static_cast<size_t>(rows * pairs) * 4);
    const __m512i rows_0_to_15 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i row_offsets = _mm512_mullo_epi32(rows_0_to_15, _mm512_set1_epi32(static_cast<int>(pairs)));
    for (int64_t i = i0; i < i1; i += 16) {
      const __mmask16 live = first_n(i1 - i);
      for (int64_t kp = 0; kp < kc / 2 && k0 + 2 * kp < p.K; ++kp) {
        const int64_t k = k0 + 2 * kp;
        const __m512 even = _mm512_maskz_loadu_ps(live, p.A + k * p.lda + i);
        const __m512 odd = k + 1 < p.K ? _mm512_maskz_loadu_ps(live, p.A + (k + 1) * p.lda + i) : _mm512_setzero_ps();
        _mm512_mask_i32scatter_epi32(dst + (i - i0) * pairs + kp, live, row_offsets,
                                     pack_avx512::interleave_rows(even, odd), 4);
      }
    }
  }

  void pack_b_panel(const Product& p, int64_t col0, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    pack_avx512::pack_b_panel(p, col0, k0, kc, dst);
    std::memset(dst + kc / 2 * kCols, 0, static_cast<size_t>((pairs - kc / 2) * kCols) * 4);
  }

  // The avx512_bf16 build's epilogue, from the 32 x 32 block of sums.
  void store_block(const float* acc, int rows, int64_t cols, float alpha, float beta, const float* bias, float* C,
                   int64_t ldc) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int v = 0; v < 2 && cols > 16 * v; ++v) {
      const __mmask16 m = first_n(cols - 16 * v);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
      for (int r = 0; r < rows; ++r) {
        float* c = C + r * ldc + 16 * v;
        __m512 out = _mm512_mul_ps(va, _mm512_load_ps(acc + r * kCols + 16 * v));
        if (beta != 0.f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), out);
        if (bias) out = _mm512_add_ps(out, b);
        _mm512_mask_storeu_ps(c, m, out);
      }
    }
  }
};

}  // namespace

void gemm_amx_unchecked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                        const float* bias) {
  bf16_amx::gemm<AmxMachine>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_amx_b_bits_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  bf16_amx::gemm_b_bits<AmxMachine>(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_packed_amx_unchecked(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                               int64_t in_features, const float* bias, float* C, int64_t ldc) {
  bf16_amx::gemm_packed<AmxMachine>(A, M, lda, packed, out_features, in_features, bias, C, ldc);
}

}  // namespace qkv::kernels::bf16_isa
