// gemm_int8's AVX-512 VNNI build (int8_gemm_isa.h; the scheme is described at the top of
// int8_gemm.cpp). CMakeLists.txt gives this file alone -mavx512f/bw/dq/vl/vnni, and the AVX2 build
// calls in here (vnni_build_unchecked) only where kernels/isa.h enables Isa::Avx512Vnni. So nothing
// here runs before that call (no dynamic initialisers), and it uses no inline function or template
// that another file might also instantiate: the linker could keep this file's AVX-512 copy for all.
// GCC 12's _mm512_slli_epi32 and _mm512_cvtepi32_ps read an undefined register on purpose and warn
// about it (as in gelu_avx512.cpp, whose flags CMakeLists.txt sets for it).
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // clang has no such group (it warns of the pragma instead)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "qkv/kernels/int8_avx512.h"
#include "qkv/kernels/int8_gemm_isa.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__)
#error "int8_gemm_vnni.cpp must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni"
#endif

namespace qkv::kernels::int8_isa {

namespace {

constexpr int64_t kPanel = QuantizedWeights::kPanel;
constexpr int64_t kQuad = QuantizedWeights::kQuad;
constexpr int64_t kQuadBytes = kPanel * kQuad;  // one input quad of a panel: 64 int8, two pair lines
// Rows per micro-kernel call: 8 rows x 2 panels = 16 accumulators of 16 int32, plus 2 weight vectors,
// 1 broadcast quad of A and the interleaving index: 20 of the 32 zmm registers. On Zen 4 (one
// vpdpbusd per cycle) 4, 6 and 10 rows ran as fast as 8, 12 rows about 5% slower (bench_int8_gemm).
constexpr int kRows = 8;
// Rows per pass over a block of panels, as the AVX2 build (int8_gemm.cpp: kRowChunk): the stores
// of a chunk touch few pages.
constexpr int64_t kRowChunk = 32;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
using avx512::first_lanes;
using avx512::kInterleave;
using avx512::load_quad;

// What one micro-kernel call needs besides the rows of A: one or two adjacent panels.
struct TileOperand {
  const int8_t* weights;  // the first panel; the second starts panel_bytes later
  int64_t panel_bytes;
  int64_t quads;
  const int32_t* column_sums;  // kPanel per panel, zero-padded
  const float* scales;         // kPanel per panel, zero-padded
  const float* bias;           // from the tile's first column, or null
  __mmask16 columns[2];        // the columns of each panel that exist
};

// The sums start at -128 * sum_k W[o][k], which takes off what the +128 of the activations added.
// The int32 arithmetic wraps (128 * 255 * K may pass 2^31), but the exact result fits, so it is exact.
__m512i negated_compensation(const int32_t* column_sums) {
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_load_si512(column_sums), 7));
}

int32_t load_quad_of_a(const uint8_t* a) {
  int32_t quad;
  std::memcpy(&quad, a, sizeof quad);
  return quad;
}

// Writes one row of one panel of the tile, as the AVX2 build: fma(float(sum), a_scale * w_scale, bias).
void store_row(__m512i sum, float a_scale, const TileOperand& w, int panel, float* C_row) {
  const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a_scale), _mm512_load_ps(w.scales + panel * kPanel));
  const __mmask16 columns = w.columns[panel];
  const __m512 bias = w.bias ? _mm512_maskz_loadu_ps(columns, w.bias + panel * kPanel) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(C_row + panel * kPanel, columns, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, bias));
}

// C[0..R) x P panels: the whole K sum is kept in registers and C is written once. Each input quad
// loads one 64-byte line of weights per panel, interleaves it, and multiplies it by every row's
// broadcast quad (a[k..k+3] + 128). Named accumulators, not an array: see the AVX2 micro-kernel.
template <int R, int P>
void micro_kernel(const uint8_t* A, int64_t lda, const float* a_scales, const TileOperand& w, float* C,
                  int64_t ldc) {
  static_assert(R >= 1 && R <= kRows && (P == 1 || P == 2), "8 rows x 2 panels");
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const __m512i start0 = negated_compensation(w.column_sums);
  const __m512i start1 = P > 1 ? negated_compensation(w.column_sums + kPanel) : start0;
  __m512i c00 = start0, c10 = start0, c20 = start0, c30 = start0, c40 = start0, c50 = start0, c60 = start0;
  __m512i c70 = start0, c01 = start1, c11 = start1, c21 = start1, c31 = start1, c41 = start1, c51 = start1;
  __m512i c61 = start1, c71 = start1;
  const int8_t* line = w.weights;
  const int64_t quads = w.quads, second = w.panel_bytes;
  for (int64_t q = 0; q < quads; ++q, line += kQuadBytes) {
    const __m512i w0 = load_quad(line, interleave);
    const __m512i w1 = P > 1 ? load_quad(line + second, interleave) : w0;
    const uint8_t* a_quad = A + q * kQuad;
#define QKV_VNNI_ROW_STEP(r)                                                \
  if constexpr (R > r) {                                                    \
    const __m512i a = _mm512_set1_epi32(load_quad_of_a(a_quad + r * lda));  \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, a, w0);                          \
    if constexpr (P > 1) c##r##1 = _mm512_dpbusd_epi32(c##r##1, a, w1);     \
  }
    QKV_VNNI_ROW_STEP(0)
    QKV_VNNI_ROW_STEP(1)
    QKV_VNNI_ROW_STEP(2)
    QKV_VNNI_ROW_STEP(3)
    QKV_VNNI_ROW_STEP(4)
    QKV_VNNI_ROW_STEP(5)
    QKV_VNNI_ROW_STEP(6)
    QKV_VNNI_ROW_STEP(7)
#undef QKV_VNNI_ROW_STEP
  }
  const __m512i sums[kRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                                  {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  for (int r = 0; r < R; ++r) {
    store_row(sums[r][0], a_scales[r], w, 0, C + r * ldc);
    if constexpr (P > 1) store_row(sums[r][1], a_scales[r], w, 1, C + r * ldc);
  }
}

using MicroKernel = void (*)(const uint8_t*, int64_t, const float*, const TileOperand&, float*, int64_t);
struct KernelsByRows {
  MicroKernel rows[kRows];  // rows[r - 1] handles r rows
};
template <int P, size_t... R>
constexpr KernelsByRows kernels_by_rows(std::index_sequence<R...>) {
  return {{micro_kernel<static_cast<int>(R) + 1, P>...}};
}
// kKernels[P - 1]: P panels.
constexpr KernelsByRows kKernels[2] = {kernels_by_rows<1>(std::make_index_sequence<kRows>()),
                                       kernels_by_rows<2>(std::make_index_sequence<kRows>())};

// Rows [row0, row_end) against panels p .. p + P - 1.
void tile_column(const uint8_t* Aq, const float* a_scales, int64_t row0, int64_t row_end, const QuantizedWeights& W,
                 int64_t p, int P, const float* bias, float* C, int64_t ldc) {
  const int64_t padded = W.padded_in_features(), col0 = p * kPanel;
  const int64_t cols = min64(P * kPanel, W.out_features() - col0);
  const TileOperand w{W.panel(p),
                      padded * kPanel,
                      padded / kQuad,
                      W.column_sums() + col0,
                      W.scales() + col0,
                      bias ? bias + col0 : nullptr,
                      {first_lanes(min64(kPanel, cols)), first_lanes(max64(0, cols - kPanel))}};
  for (int64_t i = row0; i < row_end; i += kRows) {
    const int rows = static_cast<int>(min64(kRows, row_end - i));
    kKernels[P - 1].rows[rows - 1](Aq + i * padded, padded, a_scales + i, w, C + i * ldc + col0, ldc);
  }
}

// Rows [0, M) against panels [p_begin, p_end), two panels at a time (the last may be alone), in
// chunks of kRowChunk rows as the AVX2 build.
void block_product(const void* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W, int64_t p_begin,
                   int64_t p_end, const float* bias, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; i += kRowChunk)
    for (int64_t p = p_begin; p < p_end; p += 2)
      tile_column(static_cast<const uint8_t*>(Aq), a_scales, i, min64(M, i + kRowChunk), W, p,
                  static_cast<int>(min64(2, p_end - p)), bias, C, ldc);
}

// The activations as u8 (the kernel's unsigned operand); the padding gets 128 (a zero), which meets
// zero weights.
constexpr Build kVnniBuild{sizeof(uint8_t), 2, kRows, avx512::quantize_row<true>, block_product};

}  // namespace

const Build& vnni_build_unchecked() { return kVnniBuild; }

}  // namespace qkv::kernels::int8_isa
