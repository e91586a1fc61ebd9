// gemm_int8's AMX build (int8_amx_blocking.h) on AMX-INT8's tiles (amx_tiles.h), compiled with the
// AMX and AVX-512 flags (cmake/qkv_isa_sources.cmake); int8_isa calls in here only at Isa::Amx, and
// nothing here runs before that call (no dynamic initialisers). Quantization and the repacking of
// the weights are AVX-512 code.
// GCC 12's _mm512_reduce_max_ps and _mm512_cvtepi32_ps read an undefined register on purpose and warn
// about it (as in int8_gemm_vnni.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/amx_tiles.h"
#include "qkv/kernels/int8_amx_blocking.h"
#include "qkv/kernels/int8_gemm_isa.h"

namespace qkv::kernels::int8_isa {

namespace {

__mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u); }

// The same maximum as the AVX2 build's (max is exact, whatever the order).
float max_abs(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  if (k < n) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(n - k), x + k)));
  return _mm512_reduce_max_ps(m);
}

// 16 activations to int8 as the AVX2 build rounds them (x * inverse, cvtps2dq in the default
// rounding mode; |x * inverse| <= 127).
__m128i quantize16(__m512 x, __m512 inverse) {
  return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x, inverse)));
}

float quantize_row_s8(const float* x, int64_t n, int64_t padded, void* q_out) {
  int8_t* q = static_cast<int8_t*>(q_out);
  const RowScale s = row_scale(max_abs(x, n));
  const __m512 inverse = _mm512_set1_ps(s.inverse);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), quantize16(_mm512_loadu_ps(x + k), inverse));
  for (; k < padded; k += 16) {
    const __m512 tail = _mm512_maskz_loadu_ps(first_lanes(n > k ? n - k : 0), x + k);
    _mm_mask_storeu_epi8(q + k, first_lanes(padded - k), quantize16(tail, inverse));
  }
  return s.scale;
}

// Two pair lines of a panel (features 0..15 x k, k + 1, then x k + 2, k + 3) as 16-bit words j and
// 16 + j, interleaved to feature j's quad in 32-bit lane j: a B tile row.
alignas(64) constexpr int16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

struct AmxMachine {
  amx::HardwareTiles<amx::Op::Int8> tiles;

  void repack_panel(const QuantizedWeights& W, int64_t p, int64_t quads, int8_t* dst) {
    const __m512i interleave = _mm512_load_si512(kInterleave);
    const int8_t* line = W.panel(p);
    const int64_t stored = W.padded_in_features() / 4;
    for (int64_t kq = 0; kq < quads; ++kq) {
      const __m512i row = kq < stored ? _mm512_permutexvar_epi16(interleave, _mm512_load_si512(line + kq * 64))
                                      : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + kq * 64, row);
    }
  }

  // The VNNI build's dequantization (store_row there), from a 32 x 32 block of sums.
  void store_block(const int32_t* sums, int rows, int64_t cols, const float* a_scales, const float* w_scales,
                   const float* bias, float* C, int64_t ldc) {
    for (int64_t v = 0; v < 2 && cols > 16 * v; ++v) {
      const __mmask16 m = first_lanes(cols - 16 * v);
      const __m512 w_scale = _mm512_maskz_loadu_ps(m, w_scales + 16 * v);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
      for (int r = 0; r < rows; ++r) {
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a_scales[r]), w_scale);
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_loadu_si512(sums + r * 32 + 16 * v));
        _mm512_mask_storeu_ps(C + r * ldc + 16 * v, m, _mm512_fmadd_ps(sum, scale, b));
      }
    }
  }
};

void block_product(const void* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W, int64_t p_begin,
                   int64_t p_end, const float* bias, float* C, int64_t ldc) {
  AmxMachine m;
  int8_amx::block_product(m, static_cast<const int8_t*>(Aq), a_scales, M, W, p_begin, p_end, bias, C, ldc);
}

constexpr Build kAmxBuild{sizeof(int8_t), 2, int8_amx::kBlockRows, quantize_row_s8, block_product};

}  // namespace

const Build& amx_build_unchecked() { return kAmxBuild; }

}  // namespace qkv::kernels::int8_isa
