// What gemm_int8's AVX-512 builds share (int8_gemm_vnni.cpp, int8_gemm_amx.cpp): the activations'
// quantization as the AVX2 build rounds them, and the weights' pair lines interleaved into quads.
// Included by translation units built for AVX-512 alone: internal linkage only.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/int8_gemm_isa.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "int8_avx512.h needs -mavx512f -mavx512bw -mavx512vl"
#endif

namespace qkv::kernels::int8_isa::avx512 {

namespace {

// The first n of 16 lanes (all 16 from n = 16 on; none for n <= 0).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1u);
}

// The same maximum as the AVX2 build's (max is exact, whatever the order).
inline float max_abs(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  if (k < n) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(n - k), x + k)));
  return _mm512_reduce_max_ps(m);
}

// 16 activations to int8 as the AVX2 build rounds them (x * inverse, cvtps2dq in the default
// rounding mode, within [-127, 127]); Unsigned: then + 128 to u8, flipping the sign bit of the byte.
template <bool Unsigned>
__m128i quantize16(__m512 x, __m512 inverse) {
  const __m128i q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x, inverse)));
  if constexpr (Unsigned) return _mm_xor_si128(q, _mm_set1_epi8(static_cast<char>(0x80)));
  return q;
}

// One row of activations to int8 (or u8: + 128), the padding to `padded` a zero (128 for u8).
template <bool Unsigned>
float quantize_row(const float* x, int64_t n, int64_t padded, void* q_out) {
  int8_t* q = static_cast<int8_t*>(q_out);
  const RowScale s = row_scale(max_abs(x, n));
  const __m512 inverse = _mm512_set1_ps(s.inverse);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), quantize16<Unsigned>(_mm512_loadu_ps(x + k), inverse));
  for (; k < padded; k += 16) {
    const __m512 tail = _mm512_maskz_loadu_ps(first_lanes(n - k), x + k);
    _mm_mask_storeu_epi8(q + k, first_lanes(padded - k), quantize16<Unsigned>(tail, inverse));
  }
  return s.scale;
}

// Two pair lines of a panel (features 0..15 x inputs k, k+1, then x k+2, k+3), as 16-bit words j and
// 16 + j for feature j, interleaved to feature j's quad (k..k+3) in 32-bit lane j: vpdpbusd's
// operand, and a row of an AMX B tile.
alignas(64) constexpr int16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

inline __m512i load_quad(const int8_t* line, __m512i interleave) {
  return _mm512_permutexvar_epi16(interleave, _mm512_load_si512(line));
}

}  // namespace
}  // namespace qkv::kernels::int8_isa::avx512
