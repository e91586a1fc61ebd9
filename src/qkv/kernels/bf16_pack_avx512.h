// The bf16 packing that gemm_bf16's avx512_bf16 and AMX builds share (bf16_gemm_avx512.cpp,
// bf16_gemm_amx.cpp): a "word" is a pair of bf16 in 32 bits, (k even) | (k odd) << 16, and op(B) is
// packed in panels of 32 columns, k-pair-major, panel[kp * 32 + j].
//
// Included by translation units built with -mavx512bf16 alone: internal linkage only.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/gemm_blocking.h"

#if !defined(__AVX512BF16__)
#error "bf16_pack_avx512.h needs -mavx512bf16"
#endif

namespace qkv::kernels::bf16_isa::pack_avx512 {

namespace {

using blocking::Product;

constexpr int64_t kCols = kPanelColumns;  // columns per panel: two vectors of 16 float32 lanes
constexpr int64_t kMaxKBlock = 1024;     // the longest K block (bf16_isa::k_block)

// The words of rows k and k + 1 (nullptr: zeros) at 16 columns: the pairs interleaved by vpermw.
inline __m512i interleave_rows(__m512 row_k, __m512 row_k1) {
  const __m512i index = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(row_k1, row_k));  // [k: 16][k+1: 16]
  return _mm512_permutexvar_epi16(index, both);
}

inline __mmask16 first_n(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

// r[i][j] becomes r[j][i], for 32-bit elements: pairs of rows interleaved (32, then 64 bits within
// each 128-bit lane), then the lanes of four rows transposed as a 4 x 4 matrix of lanes.
// GCC 12's unpack and shuffle intrinsics pass an undefined register on purpose and warn about it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // t[2p] lane L: (2p, 4L), (2p+1, 4L), (2p, 4L+1), (2p+1, 4L+1)
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int q = 0; q < 16; q += 4) {  // r[q + c] lane L: column 4L + c, rows q .. q + 3
    r[q] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
    r[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
    r[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
    r[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c gathers lane L of r[c], r[4 + c], r[8 + c], r[12 + c]
    const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    t[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#pragma GCC diagnostic pop

// One row of kc floats (kc even, `valid` of them read, the rest zero) as kc / 2 words.
inline void convert_row(const float* src, int64_t valid, int64_t kc, uint32_t* dst) {
  int64_t k = 0;
  for (; k + 32 <= valid; k += 32) {
    const __m512 lo = _mm512_loadu_ps(src + k), hi = _mm512_loadu_ps(src + k + 16);
    _mm512_storeu_si512(dst + k / 2, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  for (; k < kc; k += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(first_n(valid - k), src + k);
    const __m512 hi = _mm512_maskz_loadu_ps(first_n(std::max<int64_t>(0, valid - k - 16)), src + k + 16);
    const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    const int64_t n = std::min<int64_t>(16, (kc - k) / 2);
    _mm512_mask_storeu_epi32(dst + k / 2, first_n(n), words);
  }
}


// The words of B's rows k and k + 1 (row_k1 null: zeros) at columns [col, col + 32), for a B stored
// (K, N): two vectors of words, zero past `cols` columns.
inline void pair_words(const float* row_k, const float* row_k1, int64_t cols, uint32_t* dst) {
  const __mmask16 m0 = first_n(cols), m1 = first_n(std::max<int64_t>(0, cols - 16));
  const __m512 a0 = _mm512_maskz_loadu_ps(m0, row_k), a1 = _mm512_maskz_loadu_ps(m1, row_k + 16);
  const __m512 b0 = row_k1 ? _mm512_maskz_loadu_ps(m0, row_k1) : _mm512_setzero_ps();
  const __m512 b1 = row_k1 ? _mm512_maskz_loadu_ps(m1, row_k1 + 16) : _mm512_setzero_ps();
  _mm512_store_si512(dst, interleave_rows(a0, b0));
  _mm512_store_si512(dst + 16, interleave_rows(a1, b1));
}

// The same words from rows of bf16 bits (Product::B_bits): each column's two halves put side by
// side, nothing rounded.
inline void pair_words(const uint16_t* row_k, const uint16_t* row_k1, int64_t cols, uint32_t* dst) {
  const __mmask32 m = cols >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << cols) - 1u);
  const __m512i even = _mm512_maskz_loadu_epi16(m, row_k);
  const __m512i odd = row_k1 ? _mm512_maskz_loadu_epi16(m, row_k1) : _mm512_setzero_si512();
  // 16-bit element 2j of the words of columns [0, 16) is even[j], 2j + 1 is odd[j] (index 32 + j).
  const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                       5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  _mm512_store_si512(dst, _mm512_permutex2var_epi16(even, low, odd));
  _mm512_store_si512(dst + 16, _mm512_permutex2var_epi16(even, high, odd));
}

// Rows k and k + 1 of a row-major op(B) = B, float32 or bf16 bits, at columns [col0, col0 + 32).
inline void pair_words_at(const Product& p, int64_t k, int64_t col0, int64_t cols, uint32_t* dst) {
  const bool odd = k + 1 < p.K;
  if (p.B_bits) {
    const uint16_t* row = p.B_bits + k * p.ldb + col0;
    return pair_words(row, odd ? row + p.ldb : nullptr, cols, dst);
  }
  const float* row = p.B + k * p.ldb + col0;
  pair_words(row, odd ? row + p.ldb : nullptr, cols, dst);
}

// Panel of op(B)'s columns [col0, col0 + 32) over k in [k0, k0 + kc): dst[kp * 32 + j]; columns past
// N and k past K are zero.
inline void pack_b_panel(const Product& p, int64_t col0, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t cols = std::min(kCols, p.N - col0), kpairs = kc / 2;
  if (!p.trans_b) {  // B stored (K, N): rows k and k + 1 give a vector of words per 16 columns
    for (int64_t kp = 0; kp < kpairs; ++kp) pair_words_at(p, k0 + 2 * kp, col0, cols, dst + kp * kCols);
    return;
  }
  // B stored (N, K): column j of op(B) is row col0 + j of B, whose pairs are adjacent already; 16
  // rows' words at a time, transposed in registers (a word a store took 3x as long on attention's
  // Q K^T heads, where this packing is a large part of a product).
  const int64_t valid = std::min(kc, p.K - k0);
  for (int64_t jb = 0; jb < kCols; jb += 16)
    for (int64_t kp0 = 0; kp0 < kpairs; kp0 += 16) {
      __m512i words[16];
      const int64_t k_left = valid - 2 * kp0;  // floats of each row from k0 + 2 kp0 on
      const __mmask16 lo = first_n(std::max<int64_t>(0, k_left)), hi = first_n(std::max<int64_t>(0, k_left - 16));
      for (int r = 0; r < 16; ++r) {
        if (jb + r >= cols) {
          words[r] = _mm512_setzero_si512();
          continue;
        }
        const float* row = p.B + (col0 + jb + r) * p.ldb + k0 + 2 * kp0;
        words[r] = reinterpret_cast<__m512i>(
            _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + 16), _mm512_maskz_loadu_ps(lo, row)));
      }
      transpose_16x16(words);  // words[i]: word kp0 + i of the 16 columns
      const int64_t n = std::min<int64_t>(16, kpairs - kp0);
      for (int64_t i = 0; i < n; ++i) _mm512_store_si512(dst + (kp0 + i) * kCols + jb, words[i]);
    }
}

// Panels [first, first + count) of op(B) from column col0 = first * 32 on, panel q at dst + q * panel_words,
// each as pack_b_panel packs it. A B stored (K, N) is read along its rows, every panel's columns of a
// row pair at once: a panel at a time walked down K for each 128 bytes of a row, and where B comes
// from memory (the activations of a weight's gradient, dW = dY^T X) the packing ran at a fraction of
// the bandwidth that reading whole rows gets (pack_b_panel took 5% of a Bible bf16 step on a Zen 4).
inline void pack_b_panels(const Product& p, int64_t first, int64_t count, int64_t k0, int64_t kc, int64_t panel_words,
                          uint32_t* dst) {
  if (p.trans_b) {
    for (int64_t q = 0; q < count; ++q) pack_b_panel(p, (first + q) * kCols, k0, kc, dst + q * panel_words);
    return;
  }
  for (int64_t kp = 0; kp < kc / 2; ++kp)
    for (int64_t q = 0; q < count; ++q) {
      const int64_t col0 = (first + q) * kCols;
      pair_words_at(p, k0 + 2 * kp, col0, std::min(kCols, p.N - col0), dst + q * panel_words + kp * kCols);
    }
}

}  // namespace
}  // namespace qkv::kernels::bf16_isa::pack_avx512
