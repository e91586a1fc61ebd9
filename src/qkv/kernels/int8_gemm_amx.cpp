// gemm_int8's AMX build (int8_amx_blocking.h) on AMX-INT8's tiles (amx_tiles.h), compiled with the
// AMX and AVX-512 flags (cmake/qkv_isa_sources.cmake); int8_isa calls in here only at Isa::Amx, and
// nothing here runs before that call (no dynamic initialisers). Quantization and the repacking of
// the weights are AVX-512 code.
// GCC 12's _mm512_reduce_max_ps and _mm512_cvtepi32_ps read an undefined register on purpose and warn
// about it (as in int8_gemm_vnni.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // clang has no such group (it warns of the pragma instead)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/amx_tiles.h"
#include "qkv/kernels/int8_amx_blocking.h"
#include "qkv/kernels/int8_avx512.h"
#include "qkv/kernels/int8_gemm_isa.h"

namespace qkv::kernels::int8_isa {

namespace {

using avx512::first_lanes;

struct AmxMachine {
  amx::HardwareTiles<amx::Op::Int8> tiles;

  void repack_panel(const QuantizedWeights& W, int64_t p, int64_t quads, int8_t* dst) {
    const __m512i interleave = _mm512_load_si512(avx512::kInterleave);
    const int8_t* line = W.panel(p);
    const int64_t stored = W.padded_in_features() / 4;
    for (int64_t kq = 0; kq < quads; ++kq) {
      const __m512i row = kq < stored ? avx512::load_quad(line + kq * 64, interleave) : _mm512_setzero_si512();
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

constexpr Build kAmxBuild{sizeof(int8_t), 2, int8_amx::kBlockRows, avx512::quantize_row<false>,
                         int8_amx::block_product_on<AmxMachine>};

}  // namespace

const Build& amx_build_unchecked() { return kAmxBuild; }

}  // namespace qkv::kernels::int8_isa
