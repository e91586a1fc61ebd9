// gemm_bf16's AMX build (bf16_amx_blocking.h) on AMX-BF16's tiles (amx_tiles.h), compiled with the
// AMX and AVX512_BF16 flags (cmake/qkv_isa_sources.cmake); bf16_isa calls in here only at Isa::Amx.
// Packing and the epilogue are the avx512_bf16 build's vector code (bf16_pack_avx512.h).
#include <immintrin.h>

#include <algorithm>
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

  // Rows [i0, i1) of op(A) as words in tiles (bf16_amx::a_word_index), the rest of the last 32-row
  // group zero.
  void pack_a_rows(const Product& p, int64_t i0, int64_t i1, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    const int64_t rows = i1 - i0, last_group = rows / kBlockRows * kBlockRows;
    if (last_group < rows)  // a partial group: its missing rows stay zero
      std::memset(dst + last_group * pairs, 0, static_cast<size_t>(kBlockRows * pairs) * 4);
    const int64_t valid = std::min(kc, p.K - k0);
    if (!p.trans_a) return convert_rows(p.A + i0 * p.lda + k0, p.lda, rows, valid, pairs, dst);
    // Along A's rows (k) in the inner loop's reads: each k row of the block read left to right.
    for (int64_t kp = 0; kp < pairs; kp += bf16_amx::kTilePairs)
      for (int64_t r = 0; r < rows; r += bf16_amx::kTileRows)
        transpose_tile(p.A + k0 * p.lda + i0 + r, p.lda, std::min<int64_t>(16, rows - r), valid - 2 * kp, kp,
                       dst + bf16_amx::a_word_index(r, kp, pairs));
  }

  // Each row's `valid` values (the rest of its 2 x pairs zero) as 16-word pieces, each to its tile,
  // a tile at a time (its 1 KB written in order: a row at a time wrote 64 bytes 2 KB apart).
  static void convert_rows(const float* A, int64_t lda, int64_t rows, int64_t valid, int64_t pairs, uint32_t* dst) {
    constexpr int64_t kChunk = 2 * bf16_amx::kTilePairs;  // values of a tile row
    for (int64_t r0 = 0; r0 < rows; r0 += bf16_amx::kTileRows)
      for (int64_t kp = 0; kp < pairs; kp += bf16_amx::kTilePairs)
        for (int64_t r = r0; r < std::min(rows, r0 + bf16_amx::kTileRows); ++r)
          pack_avx512::convert_row(A + r * lda + 2 * kp, std::clamp<int64_t>(valid - 2 * kp, 0, kChunk), kChunk,
                                   dst + bf16_amx::a_word_index(r, kp, pairs));
  }

  // A stored (K, M): the tile of `live` rows (columns of A from `a`) and the 16 pairs from pair kp of
  // the block, `left` values of the block remaining from there (zero past them): 32 rows of A
  // interleaved into 16 vectors of words (pair j, one lane a row), transposed to a row's 16 words.
  static void transpose_tile(const float* a, int64_t lda, int64_t live, int64_t left, int64_t kp, uint32_t* tile) {
    const __mmask16 rows = first_n(live);
    __m512i w[16];
    for (int j = 0; j < 16; ++j) {
      const int64_t k = 2 * (kp + j);
      const float* even = a + k * lda;
      const __m512 e = 2 * j < left ? _mm512_maskz_loadu_ps(rows, even) : _mm512_setzero_ps();
      const __m512 o = 2 * j + 1 < left ? _mm512_maskz_loadu_ps(rows, even + lda) : _mm512_setzero_ps();
      w[j] = pack_avx512::interleave_rows(e, o);
    }
    pack_avx512::transpose_16x16(w);
    for (int r = 0; r < 16; ++r) _mm512_store_si512(tile + r * 16, w[r]);
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
