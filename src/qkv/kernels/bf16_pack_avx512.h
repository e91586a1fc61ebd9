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


// Panel of op(B)'s columns [col0, col0 + 32) over k in [k0, k0 + kc): dst[kp * 32 + j]; columns past
// N and k past K are zero.
inline void pack_b_panel(const Product& p, int64_t col0, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t cols = std::min(kCols, p.N - col0), kpairs = kc / 2;
  if (!p.trans_b) {  // B stored (K, N): rows k and k + 1 give a vector of words per 16 columns
    const __mmask16 m0 = first_n(cols), m1 = first_n(std::max<int64_t>(0, cols - 16));
    for (int64_t kp = 0; kp < kpairs; ++kp) {
      const int64_t k = k0 + 2 * kp;
      const float* r0 = p.B + k * p.ldb + col0;
      const float* r1 = k + 1 < p.K ? r0 + p.ldb : nullptr;
      const __m512 a0 = _mm512_maskz_loadu_ps(m0, r0), a1 = _mm512_maskz_loadu_ps(m1, r0 + 16);
      const __m512 b0 = r1 ? _mm512_maskz_loadu_ps(m0, r1) : _mm512_setzero_ps();
      const __m512 b1 = r1 ? _mm512_maskz_loadu_ps(m1, r1 + 16) : _mm512_setzero_ps();
      _mm512_store_si512(dst + kp * kCols, interleave_rows(a0, b0));
      _mm512_store_si512(dst + kp * kCols + 16, interleave_rows(a1, b1));
    }
    return;
  }
  // B stored (N, K): column j of op(B) is row col0 + j of B, whose pairs are adjacent already.
  alignas(64) uint32_t words[kMaxKBlock / 2];
  const int64_t valid = std::min(kc, p.K - k0);
  for (int64_t j = 0; j < kCols; ++j) {
    if (j < cols) convert_row(p.B + (col0 + j) * p.ldb + k0, valid, kc, words);
    for (int64_t kp = 0; kp < kpairs; ++kp) dst[kp * kCols + j] = j < cols ? words[kp] : 0u;
  }
}

}  // namespace
}  // namespace qkv::kernels::bf16_isa::pack_avx512
