// Instruction scheme: three builds of the same product, chosen at run time (int8_gemm_isa.h): AMX
// where kernels/isa.h enables Isa::Amx, else AVX-512 VNNI where it enables Isa::Avx512Vnni, else
// AVX2. All sum exactly in int32 and dequantize with the same fma, so they give the same bits. The
// AMX build (int8_amx_blocking.h: TDPBSSD on int8 activations, no +128) is written over its machine,
// so that its blocking also runs on a model of the tiles that the tests check on every CPU.
//
// AVX2 (this file). The two AVX2 integer multiply-adds are
//   vpmaddubsw  u8 x s8 -> s16, adjacent pairs summed with SATURATION, and
//   vpmaddwd    s16 x s16 -> s32, adjacent pairs summed exactly (|sum| <= 2 * 127 * 127 here).
// vpmaddubsw needs one operand unsigned: shifting the activations by +128 gives pairs up to
// 2 * 255 * 127 = 64770, which saturates s16 unless the weights are cut to 7 bits (accuracy lost), and
// it needs a per-column compensation term; the sign trick (|a| x sign(a)*w) stays exact but costs a
// vpsignb, a vpabsb, and a vpmaddwd against ones (to widen s16 to s32) on top of each vpmaddubsw.
// We sign-extend instead: the weights are stored as int8 (a quarter of the float bytes, read once per
// product) and widened in registers with vpmovsxbw, the activations are quantized straight to int16,
// and each vpmaddwd does 16 exact multiply-adds into int32. Per 32 multiply-adds that is 2 vpmaddwd +
// 2 vpaddd, against vpmaddubsw + vpmaddwd + vpsignb + vpaddd (+ vpabsb) for the sign trick: the same
// number of multiplier uops (the bound on Zen 3) with fewer instructions, no saturation, no
// restricted weight range, and int32 sums that are bit-exact whatever the order. The sign trick also
// needs two more registers (|a| and the vector of ones), so its 6-row x 16-column block would not fit
// in AVX2's 16 registers. Measured on the
// EPYC (Zen 3) host, one thread: about 140 G int-ops/s, 1.6-2.3x OpenBLAS SGEMM at M = 32..128 and
// 4-6x at M = 4 (bench/bench_int8_gemm.cpp).
//
// AVX-512 VNNI (int8_gemm_vnni.cpp). vpdpbusd multiplies u8 by s8 and adds each four adjacent
// products into an int32 lane: 64 multiply-adds per instruction, with no 16-bit step to saturate
// (the non-saturating form wraps, see below). Its unsigned operand is the activations: quantized to
// int8 exactly as above, then + 128 (u8 in [1, 255]). Since sum_k (a + 128) w = sum_k a w + 128 sum_k w,
// the accumulators start at -128 * sum_k W[o][k], from column sums stored after the panels at
// quantization time. The int32 adds wrap (255 * 127 * K passes 2^31 from K ~ 66000), but arithmetic
// mod 2^32 gives back the exact sum, which fits in int32 (kMaxInFeatures): the same bits as AVX2.
// The weights keep the AVX2 build's layout, K padded to a multiple of 4: two pair lines are one
// 64-byte line per input quad, which one vpermw interleaves into 16 lanes of (k..k+3) bytes. The
// interleave costs nothing measurable (the kernel is bound by vpdpbusd, one 512-bit one per cycle on
// Zen 4: a kernel reading pre-interleaved quads ran at the same speed), and one layout keeps
// QuantizedWeights, its users and both builds' tests simple. Block: 8 rows x 32 columns (2 panels),
// 16 zmm accumulators. Measured on the EPYC (Zen 4) host, one thread: 380-420 G int-ops/s at M = 32
// to 960 (the AVX2 build: 150-160 there), 240-375 at M = 4: 2.1-3x the AVX2 build (bench_int8_gemm
// prints both).
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/product_clock.h"

#include "qkv/kernels/int8_gemm_isa.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/weight_alloc.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace qkv::kernels {

namespace int8_isa {

// Below kNegligibleMax (zero rows, and denormal ones where 127 / max|x| would overflow to inf and
// 0 * inf give NaN) the row counts as zero: inverse and scale 0.
RowScale row_scale(float max_abs) {
  return max_abs >= kNegligibleMax ? RowScale{127.f / max_abs, max_abs / 127.f} : RowScale{0.f, 0.f};
}

}  // namespace int8_isa

namespace {

using int8_isa::row_scale;
using int8_isa::RowScale;

constexpr int64_t kPanel = QuantizedWeights::kPanel;
constexpr int64_t kPair = QuantizedWeights::kPair;
constexpr int64_t kPanelPairBytes = kPanel * kPair;  // one input pair of a panel: 32 int8
// Rows per micro-kernel call: 6 rows x 2 vectors of 8 int32 = 12 accumulators, plus the 2 widened
// weight vectors and 1 broadcast pair of A: 15 of AVX2's 16 registers (as the float kernel).
constexpr int kRows = 6;
// Below this many multiply-adds one thread does the product: forking costs a few microseconds.
constexpr int64_t kInt8ParallelMin = 1 << 17;

float max_abs(const float* x, int64_t n) {
  const __m256 no_sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), no_sign));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float result = *std::max_element(lanes, lanes + 8);
  for (; k < n; ++k) result = std::max(result, std::abs(x[k]));
  return result;
}

// round-half-even(x * inverse): the vector conversion (cvtps2dq) and lrint both round in the default
// MXCSR mode, so the scalar tail and the vector body agree bit for bit. |x * inverse| <= 127 up to
// one rounding of the product, so the result is always within [-127, 127].
int32_t quantize_value(float x, float inverse) { return static_cast<int32_t>(std::lrint(x * inverse)); }

// One row of activations to int16 (the kernel's operand), zero-padded to `padded` values.
float quantize_row_int16(const float* x, int64_t n, int64_t padded, void* q_out) {
  int16_t* q = static_cast<int16_t*>(q_out);
  const RowScale s = row_scale(max_abs(x, n));
  const __m256 inverse = _mm256_set1_ps(s.inverse);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), inverse));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), inverse));
    // packs works within 128-bit lanes: (lo0 hi0 lo1 hi1) -> (lo0 lo1 hi0 hi1).
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), packed);
  }
  for (; k < n; ++k) q[k] = static_cast<int16_t>(quantize_value(x[k], s.inverse));
  for (; k < padded; ++k) q[k] = 0;
  return s.scale;
}

int32_t load_pair(const int16_t* a) {
  int32_t pair;
  std::memcpy(&pair, a, sizeof pair);
  return pair;
}

// What one micro-kernel call needs besides the rows of A: the panel, its scales and bias (16 each,
// zero-padded), and how many of its 16 columns exist.
struct PanelOperand {
  const void* weights;  // int8 pair lines, or the same sign-extended to int16 (micro_kernel's Wide)
  int64_t pairs;
  const float* scales16;
  const float* bias16;
  int64_t cols;
};

// Writes row r of C's panel block, columns [0..cols), from its two vectors of int32 sums.
inline void store_dequantized_row(__m256i sum_lo, __m256i sum_hi, float a_scale, const PanelOperand& w, float* C_row) {
  const __m256 s = _mm256_set1_ps(a_scale);
  const __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lo), _mm256_mul_ps(s, _mm256_load_ps(w.scales16)),
                                    _mm256_load_ps(w.bias16));
  const __m256 hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_hi), _mm256_mul_ps(s, _mm256_load_ps(w.scales16 + 8)),
                                    _mm256_load_ps(w.bias16 + 8));
  if (w.cols == kPanel) {
    _mm256_storeu_ps(C_row, lo);
    _mm256_storeu_ps(C_row + 8, hi);
    return;
  }
  alignas(32) float tmp[kPanel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(C_row, tmp, static_cast<size_t>(w.cols) * sizeof(float));
}

// C[0..R) x one panel: the whole K sum is kept in int32 registers and C is written once. Each input
// pair loads one 32-byte line of weights, widens it to two vectors of 8 (k, k+1) int16 pairs, and
// multiplies them by every row's broadcast (a[k], a[k+1]).
//
// The accumulators are named variables, not an array: GCC keeps an array of vectors in memory and
// stores it back at every step (12 stores per step: 88 instead of 140 GFLOP/s), and it hoists all the
// broadcasts of a step ahead of the multiplies, which runs out of registers and spills. The empty
// asm statement after each row keeps the rows in order (the next row's broadcast is a load, which
// may not cross it), so each step needs only acc + 2 weight vectors + 1 broadcast + 1 product.
template <int R, bool Wide>
void micro_kernel(const int16_t* A, int64_t lda, const float* a_scales, const PanelOperand& w, float* C,
                  int64_t ldc) {
  static_assert(R >= 1 && R <= 6, "six rows of two accumulators fill the 16 AVX2 registers");
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const int8_t* line = static_cast<const int8_t*>(w.weights);
  const int64_t pairs = w.pairs;  // a local: the asm statements would have it reloaded at each step
  for (int64_t q = 0; q < pairs; ++q, line += kPanelPairBytes * (Wide ? 2 : 1)) {
    __m256i w0, w1;
    if constexpr (Wide) {
      w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(line));
      w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32));
    } else {
      w0 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(line)));
      w1 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(line + 16)));
    }
    const int16_t* a_pair = A + q * kPair;
#define QKV_INT8_ROW_STEP(r)                                            \
  if constexpr (R > r) {                                                \
    const __m256i a = _mm256_set1_epi32(load_pair(a_pair + r * lda));   \
    c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(a, w0));     \
    c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(a, w1));     \
    asm volatile("" ::: "memory");                                      \
  }
    QKV_INT8_ROW_STEP(0)
    QKV_INT8_ROW_STEP(1)
    QKV_INT8_ROW_STEP(2)
    QKV_INT8_ROW_STEP(3)
    QKV_INT8_ROW_STEP(4)
    QKV_INT8_ROW_STEP(5)
#undef QKV_INT8_ROW_STEP
  }
  const __m256i sums[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < R; ++r) store_dequantized_row(sums[r][0], sums[r][1], a_scales[r], w, C + r * ldc);
}

using MicroKernel = void (*)(const int16_t*, int64_t, const float*, const PanelOperand&, float*, int64_t);
// kKernels[r - 1] handles r rows.
template <bool Wide, size_t... R>
constexpr std::array<MicroKernel, sizeof...(R)> kernel_table(std::index_sequence<R...>) {
  return {micro_kernel<static_cast<int>(R) + 1, Wide>...};
}
constexpr auto kKernels = kernel_table<false>(std::make_index_sequence<kRows>());
constexpr auto kWideKernels = kernel_table<true>(std::make_index_sequence<kRows>());

// Rows [row0, row_end) against one panel; `wide` is the panel sign-extended to int16, or null.
void panel_product(const int16_t* Aq, const float* a_scales, int64_t row0, int64_t row_end, const QuantizedWeights& W,
                   int64_t p, const int16_t* wide, const float* bias, float* C, int64_t ldc) {
  const int64_t col0 = p * kPanel, cols = std::min(kPanel, W.out_features() - col0);
  alignas(32) float bias16[kPanel] = {};
  if (bias) std::memcpy(bias16, bias + col0, static_cast<size_t>(cols) * sizeof(float));
  const int64_t padded = W.padded_in_features();
  const PanelOperand operand{wide ? static_cast<const void*>(wide) : W.panel(p), padded / kPair, W.scales() + col0,
                             bias16, cols};
  const auto& kernels = wide ? kWideKernels : kKernels;
  for (int64_t i = row0; i < row_end; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, row_end - i));
    kernels[rows - 1](Aq + i * padded, padded, a_scales + i, operand, C + i * ldc + col0, ldc);
  }
}

// Loop order. For a few rows (M <= kRowChunk) each panel (K x 16 int8: 4 KB at K = 256) stays in
// L1 while all rows pass it: the weights are read once per product. For many rows and many outputs
// (128 x 8000), panel after panel over all rows writes 16 floats into each of 128 rows 32 KB apart:
// 128 pages per panel, more than the L1 TLB holds, and the product ran 4x slower. So the rows go
// in chunks of kRowChunk against a block of panels small enough to stay in L2 (kBlockBytes of
// weights): the weights are still read from memory once, and the stores of a chunk touch few pages.
// A chunk is whole 6-row tiles: chunks of 32 ended in a 2-row tile that cost most of a 6-row one
// (micro_kernel<2> took 5.7% of an int8 MiniLM run, against 67% for micro_kernel<6>).
constexpr int64_t kRowChunk = 6 * kRows;
constexpr int64_t kBlockBytes = 128 << 10;

// The block's panels sign-extended to int16 once, in a buffer of the calling thread, when more than
// one chunk of rows will read them: the micro-kernel then loads its weights instead of widening them
// at every tile (two vpmovsxbw a step, out of 32 vector instructions). Measured on two threads of a
// Zen 4 (AVX2 build, alternating binaries): 4-8% more G op/s at 128 to 4096 rows; at 16 rows (3
// tiles) 6% less, the widened block being read from L2 at twice the bytes for few tiles, so one chunk
// of rows or fewer keeps widening in the micro-kernel.
const int16_t* widened_panels(const QuantizedWeights& W, int64_t p_begin, int64_t p_end) {
  struct alignas(32) Vector {
    int16_t values[16];
  };
  thread_local std::vector<Vector> wide;
  const int64_t bytes = (p_end - p_begin) * W.padded_in_features() * kPanel, vectors = bytes / 16;
  if (static_cast<int64_t>(wide.size()) < vectors) wide.resize(vectors);
  const int8_t* src = W.panel(p_begin);
  for (int64_t v = 0; v < vectors; ++v)
    _mm256_store_si256(reinterpret_cast<__m256i*>(wide[v].values),
                       _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(src + v * 16))));
  return reinterpret_cast<const int16_t*>(wide.data());
}

void panel_block_product(const void* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W,
                         int64_t p_begin, int64_t p_end, const float* bias, float* C, int64_t ldc) {
  const int16_t* wide = M > kRowChunk ? widened_panels(W, p_begin, p_end) : nullptr;
  const int64_t panel_values = W.padded_in_features() * kPanel;
  for (int64_t i = 0; i < M; i += kRowChunk)
    for (int64_t p = p_begin; p < p_end; ++p)
      panel_product(static_cast<const int16_t*>(Aq), a_scales, i, std::min(M, i + kRowChunk), W, p,
                    wide ? wide + (p - p_begin) * panel_values : nullptr, bias, C, ldc);
}

constexpr int8_isa::Build kAvx2Build{sizeof(int16_t), 1, kRows, quantize_row_int16, panel_block_product};

// The calling thread's buffers for quantized activations, grown as needed and kept between calls.
struct ActivationScratch {
  std::vector<int16_t> values;  // int16 activations, or u8 ones two to an element
  std::vector<float> scales;
};
ActivationScratch& activation_scratch(int64_t M, int64_t row_bytes) {
  thread_local ActivationScratch scratch;
  const int64_t elements = (M * row_bytes + 1) / 2;
  if (static_cast<int64_t>(scratch.values.size()) < elements) scratch.values.resize(elements);
  if (static_cast<int64_t>(scratch.scales.size()) < M) scratch.scales.resize(M);
  return scratch;
}

// Row i of A quantized into Aq, through `map` first where there is one (into a buffer of the
// calling thread: one row, in L1 while the quantizer reads it).
float quantize_input_row(const int8_isa::Build& build, const float* A_row, int64_t K, int64_t padded, RowMap map,
                         void* q) {
  if (!map) return build.quantize_row(A_row, K, padded, q);
  thread_local std::vector<float> mapped;
  if (static_cast<int64_t>(mapped.size()) < K) mapped.resize(static_cast<size_t>(K));
  map(mapped.data(), A_row, K);
  return build.quantize_row(mapped.data(), K, padded, q);
}

// Items [begin, end): panels of the weights, or rows of A.
struct Range {
  int64_t begin, end;
};

// Part `part` of `parts` equal shares of `count` panels or rows, in whole tiles of the build's
// micro-kernel. Blocks of at most kBlockBytes handed out by a static loop gave one thread a block
// more than the other whenever their count was odd: MiniLM's 384 x 1536 layers were 5 blocks, 3
// against 2, and ran at 1.47x one thread's speed on two; equal shares run them at 2x (246 against
// 124 G op/s).
Range thread_share(int64_t count, int64_t tile, int64_t part, int64_t parts) {
  const int64_t tiles = (count + tile - 1) / tile;
  return {std::min(count, tiles * part / parts * tile), std::min(count, tiles * (part + 1) / parts * tile)};
}

// Panels per block within a share: blocks of at most kBlockBytes of weights (they stay in L2 while
// the row chunks pass them), of equal size, in whole tiles.
int64_t panels_per_block(Range range, int64_t panel_bytes, int64_t tile) {
  const int64_t panels = std::max<int64_t>(range.end - range.begin, 1);
  const int64_t most = std::max<int64_t>(kBlockBytes / panel_bytes, 1);
  const int64_t blocks = (panels + most - 1) / most;
  const int64_t per_block = (panels + blocks - 1) / blocks;
  return (per_block + tile - 1) / tile * tile;
}

// Weights up to this size, against at least this many tiles of rows per thread, are split among the
// threads by rows (below). Measured on two threads of a Zen 4 (AVX2 build, alternating binaries):
// at 16 and 32 rows the panel split was up to 19% and 7% faster (each thread's share of rows would be
// one or two tiles, against every panel); at 128 rows and more the row split was 0-7% faster.
constexpr int64_t kRowSplitMaxWeightBytes = 1 << 20;
constexpr int64_t kRowSplitMinTilesPerThread = 8;

// Rows [0, M) of the products, each thread taking its own rows: it quantizes them and multiplies them
// by all the weights, each of which stays in its L2 (kRowSplitMaxWeightBytes). No thread reads
// another's quantized rows and none waits for another before its products. Products of 128 rows and
// more ran 0-7% slower when the threads shared the rows and split the panels (bench_int8_gemm).
void run_by_rows(const int8_isa::Build& build, const float* A, int64_t M, int64_t lda, RowMap map,
                 const Int8Product* products, int64_t count, char* Aq, float* a_scales, int64_t parts) {
  const int64_t K = products[0].W->in_features(), padded = products[0].W->padded_in_features();
  const int64_t row_bytes = padded * build.activation_bytes;
#pragma omp parallel for schedule(static)
  for (int64_t part = 0; part < parts; ++part) {
    const auto [r0, r1] = thread_share(M, build.rows_per_tile, part, parts);
    for (int64_t i = r0; i < r1; ++i)
      a_scales[i] = quantize_input_row(build, A + i * lda, K, padded, map, Aq + i * row_bytes);
    for (int64_t o = 0; o < count && r0 < r1; ++o) {
      const Int8Product& out = products[o];
      const Range all{0, out.W->panels()};
      const int64_t per_block = panels_per_block(all, padded * kPanel, build.panels_per_tile);
      for (int64_t p = all.begin; p < all.end; p += per_block)
        build.block_product(Aq + r0 * row_bytes, a_scales + r0, r1 - r0, *out.W, p, std::min(all.end, p + per_block),
                            out.bias_or_null, out.C + r0 * out.ldc, out.ldc);
    }
  }
}

// The products with either build: the same split among threads and the same blocks of panels.
void run_build(const int8_isa::Build& build, const float* A, int64_t M, int64_t lda, RowMap map,
               const Int8Product* products, int64_t count) {
  if (M <= 0 || count <= 0) return;
  const QuantizedWeights& first = *products[0].W;
  const int64_t K = first.in_features(), padded = first.padded_in_features();
  const int64_t row_bytes = padded * build.activation_bytes;
  int64_t outputs = 0, largest_weight = 0;
  for (int64_t o = 0; o < count; ++o) {
    if (products[o].W->in_features() != K)
      throw std::invalid_argument("gemm_int8_many: the weights' in_features differ (" + std::to_string(K) + " and " +
                                  std::to_string(products[o].W->in_features()) + ")");
    outputs += products[o].W->out_features();
    largest_weight = std::max(largest_weight, products[o].W->panels() * padded * kPanel);
  }
  if (outputs <= 0) return;
  ActivationScratch& scratch = activation_scratch(M, row_bytes);
  char* Aq = reinterpret_cast<char*>(scratch.values.data());
  float* a_scales = scratch.scales.data();
  const int64_t work = M * outputs * std::max<int64_t>(K, 1);
  const bool parallel = work > kInt8ParallelMin;
  const int64_t parts = parallel ? omp_get_max_threads() : 1;
  if (parts > 1 && M >= parts * kRowSplitMinTilesPerThread * build.rows_per_tile &&
      largest_weight <= kRowSplitMaxWeightBytes)
    return run_by_rows(build, A, M, lda, map, products, count, Aq, a_scales, parts);
  // Larger weights: one parallel region where the threads quantize the rows, wait for each other at
  // the loop's barrier, then each takes an equal share of each weight's panels (output columns), so
  // each thread reads only its own part of the weights. Every output is computed by the same
  // instructions whatever the split: exact.
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i)
      a_scales[i] = quantize_input_row(build, A + i * lda, K, padded, map, Aq + i * row_bytes);
#pragma omp for schedule(static)
    for (int64_t part = 0; part < parts; ++part)
      for (int64_t o = 0; o < count; ++o) {
        const Int8Product& out = products[o];
        const Range range = thread_share(out.W->panels(), build.panels_per_tile, part, parts);
        const int64_t per_block = panels_per_block(range, padded * kPanel, build.panels_per_tile);
        for (int64_t p = range.begin; p < range.end; p += per_block)
          build.block_product(Aq, a_scales, M, *out.W, p, std::min(range.end, p + per_block), out.bias_or_null, out.C,
                              out.ldc);
      }
  }
}

void gemm_many_avx2(const float* A, int64_t M, int64_t lda, RowMap map, const Int8Product* products, int64_t count) {
  run_build(kAvx2Build, A, M, lda, map, products, count);
}

void gemm_many_vnni(const float* A, int64_t M, int64_t lda, RowMap map, const Int8Product* products, int64_t count) {
  run_build(int8_isa::vnni_build_unchecked(), A, M, lda, map, products, count);
}

void gemm_many_amx(const float* A, int64_t M, int64_t lda, RowMap map, const Int8Product* products, int64_t count) {
  run_build(int8_isa::amx_build_unchecked(), A, M, lda, map, products, count);
}

// One product of a build.
template <int8_isa::GemmMany many>
void gemm_one(const float* A, int64_t M, int64_t lda, const QuantizedWeights& W, const float* bias_or_null, float* C,
              int64_t ldc) {
  const Int8Product product{&W, bias_or_null, C, ldc};
  many(A, M, lda, nullptr, &product, 1);
}

void gemm_many_amx_model(const float* A, int64_t M, int64_t lda, RowMap map, const Int8Product* products,
                         int64_t count) {
  run_build(int8_isa::amx_model_build(), A, M, lda, map, products, count);
}

constexpr int8_isa::Gemm gemm_avx2 = gemm_one<gemm_many_avx2>;
constexpr int8_isa::Gemm gemm_vnni = gemm_one<gemm_many_vnni>;
constexpr int8_isa::Gemm gemm_amx = gemm_one<gemm_many_amx>;

template <class T>
T* aligned_array(int64_t count) {
  return static_cast<T*>(allocate_weights(static_cast<size_t>(std::max<int64_t>(0, count)) * sizeof(T)));
}

}  // namespace

QuantizedWeights::QuantizedWeights(int64_t out_features, int64_t in_features)
    : out_(out_features), in_(in_features) {
  owned_data_.reset(aligned_array<int8_t>(storage_bytes(out_features, in_features)));
  owned_scales_.reset(aligned_array<float>(scale_count(out_features)));
  data_ = owned_data_.get();
  scales_ = owned_scales_.get();
}

QuantizedWeights QuantizedWeights::view(const int8_t* storage, const float* scales, int64_t out_features,
                                        int64_t in_features) {
  QuantizedWeights w;
  w.out_ = out_features;
  w.in_ = in_features;
  w.data_ = const_cast<int8_t*>(storage);  // read only through the view: panel() and scales() const
  w.scales_ = const_cast<float*>(scales);
  return w;
}

float quantize_row(const float* x, int64_t n, int8_t* q) {
  const RowScale s = row_scale(max_abs(x, n));
  for (int64_t k = 0; k < n; ++k) q[k] = static_cast<int8_t>(quantize_value(x[k], s.inverse));
  return s.scale;
}

QuantizedWeights quantize_weights(const float* W, int64_t out_features, int64_t in_features) {
  QuantizedWeights packed(out_features, in_features);
  quantize_weights_into(W, out_features, in_features, packed.data(), packed.scales());
  return packed;
}

void quantize_weights_into(const float* W, int64_t out_features, int64_t in_features, int8_t* dst, float* scales) {
  if (in_features > QuantizedWeights::kMaxInFeatures)
    throw std::invalid_argument("quantize_weights: int32 sums would overflow past " +
                                std::to_string(QuantizedWeights::kMaxInFeatures) + " input features");
  const int64_t padded = QuantizedWeights::padded_in_features(in_features);
  const int64_t panels = (out_features + kPanel - 1) / kPanel;
  int32_t* column_sums =
      reinterpret_cast<int32_t*>(dst + QuantizedWeights::column_sums_offset(out_features, in_features));
#pragma omp parallel for schedule(static) if (out_features * in_features > kInt8ParallelMin)
  for (int64_t p = 0; p < panels; ++p) {
    std::vector<int8_t> row(static_cast<size_t>(padded));
    int8_t* panel = dst + p * padded * kPanel;
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t o = p * kPanel + j;
      std::fill(row.begin(), row.end(), int8_t{0});
      scales[o] = o < out_features ? quantize_row(W + o * in_features, in_features, row.data()) : 0.f;
      int32_t sum = 0;  // |sum| <= 127 * kMaxInFeatures
      for (int64_t k = 0; k < padded; ++k) {
        panel[(k / kPair) * kPanelPairBytes + j * kPair + k % kPair] = row[k];
        sum += row[k];
      }
      column_sums[o] = sum;
    }
  }
}

namespace int8_isa {

Gemm avx2() { return gemm_avx2; }

Gemm vnni_or_null() { return isa_enabled(Isa::Avx512Vnni) ? gemm_vnni : nullptr; }

Gemm amx_or_null() { return isa_enabled(Isa::Amx) ? gemm_amx : nullptr; }

Gemm amx_where_the_cpu_has_it() { return best_isa() >= Isa::Amx ? gemm_amx : nullptr; }

Gemm amx_model() { return gemm_one<gemm_many_amx_model>; }

Gemm chosen() {
  static const Gemm gemm = amx_or_null() ? amx_or_null() : vnni_or_null() ? vnni_or_null() : avx2();
  return gemm;
}

GemmMany chosen_many(int64_t M) {
  if (chosen() == avx2()) return gemm_many_avx2;
  return chosen() == vnni_or_null() || M < kAmxMinRows ? gemm_many_vnni : gemm_many_amx;
}

}  // namespace int8_isa

void gemm_int8(const float* A, int64_t M, int64_t lda, const QuantizedWeights& W, const float* bias_or_null, float* C,
               int64_t ldc) {
  const Int8Product product{&W, bias_or_null, C, ldc};
  gemm_int8_many(A, M, lda, &product, 1);
}

void gemm_int8_mapped(const float* A, int64_t M, int64_t lda, RowMap map, const QuantizedWeights& W,
                      const float* bias_or_null, float* C, int64_t ldc) {
  const product_clock::Scope clock("int8", M, W.out_features(), W.in_features(), false, true);
  const Int8Product product{&W, bias_or_null, C, ldc};
  int8_isa::chosen_many(M)(A, M, lda, map, &product, 1);
}

void gemm_int8_many(const float* A, int64_t M, int64_t lda, const Int8Product* products, int64_t count) {
  // One shape for the products together: their output features summed (the weights share K).
  int64_t out_features = 0;
  for (int64_t i = 0; i < count; ++i) out_features += products[i].W->out_features();
  const product_clock::Scope clock("int8", M, out_features, count > 0 ? products[0].W->in_features() : 0, false, true);
  int8_isa::chosen_many(M)(A, M, lda, nullptr, products, count);
}

}  // namespace qkv::kernels
