// gemm_bf16 on vdpbf16ps (bf16_gemm.h), compiled with -mavx512bf16 (CMakeLists.txt); bf16_isa calls
// in here only at Isa::Avx512Bf16 and above.
//
// The layout follows the instruction: vdpbf16ps adds, to each of 16 float32 lanes, the products of
// one pair of bf16 from each operand. So K is taken in pairs (kp = k / 2, K padded with a zero to
// even), and a "word" is a pair of bf16 in 32 bits, (k even) | (k odd) << 16:
//   op(B) is packed in panels of 32 columns, k-pair-major: panel[kp * 32 + j] = word of column j,
//         two 64-byte vectors per kp;
//   op(A) is converted to rows of words (row i's kp-th word at a[i][kp]) or, for a transposed A,
//         packed in tiles of kRows rows, tile[kp * kRows + r];
// and the tile broadcasts one word of each A row against the two panel vectors: kRows x 2
// accumulators. The blocking (K blocks, B blocks per thread, A blocks in L2, threads splitting rows
// or panels but never K) is gemm_blocked's, so a result does not depend on the thread count.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/bf16_pack_avx512.h"
#include "qkv/kernels/gemm_blocking.h"
#include "qkv/kernels/weight_alloc.h"

#if !defined(__AVX512BF16__)
#error "bf16_gemm_avx512.cpp must be compiled with -mavx512bf16"
#endif

namespace qkv::kernels::bf16_isa {

namespace {

using blocking::caller_scratch;
using blocking::ceil_div;
using blocking::Product;
using blocking::scale_by_beta;
using blocking::share;
using blocking::split_threads;
using pack_avx512::convert_row;
using pack_avx512::first_n;
using pack_avx512::interleave_rows;
using pack_avx512::pack_b_panels;

constexpr int kRows = 8;        // 8 rows x 2 vectors = 16 accumulators of AVX-512's 32 registers
constexpr int64_t kCols = pack_avx512::kCols;  // columns per panel: two vectors of 16 float32 lanes
constexpr int64_t kMaxKBlock = pack_avx512::kMaxKBlock, kMaxKBlockTransposedA = 512;  // as gemm_blocked
constexpr int64_t kBBlockBytes = int64_t{4} << 20;
constexpr int64_t kABlockBytes = 256 * 1024;
constexpr int64_t kParallelMin = 1 << 16;


static_assert(kCols == kPanelColumns && kMaxKBlock == 1024 && kMaxKBlockTransposedA == 512,
              "bf16_isa::k_block and the packed weights (bf16_gemm.cpp) follow these");

int64_t rows_per_a_block(int64_t kc) {
  return std::max<int64_t>(kRows, kABlockBytes / (kc * 2) / kRows * kRows);
}
int64_t panels_per_b_block(int64_t kc) { return std::max<int64_t>(1, kBBlockBytes / (kc * kCols * 2)); }

// op(A) = A^T (A stored (K, M)): rows [ib, ie) over k in [k0, k0 + kc), in tiles of kRows rows,
// tile t at dst + t * kc / 2 * kRows, dst[kp * kRows + r]; rows past ie and k past K zero.
// Rows k and k + 1 of A are read along their length, 16 values (two tiles) at a time, and
// interleaved into words as op(B)'s panels are: reading 8 values of each row a tile at a time
// touched every cache line twice, a whole K block apart, and where A's rows lie a power of two
// apart (M = 8000 floats: 32 KB) the lines of a K block share a few cache sets and left them
// between the two touches.
// `sums` (rows [ib, ie) of Product::a_row_sums, or null): each row's values added in order of k, as
// column_sum_accumulate adds them (the same bits), while they are in registers.
void pack_a_block_transposed(const Product& p, int64_t ib, int64_t ie, int64_t k0, int64_t kc, uint32_t* dst,
                             float* sums) {
  const int64_t kpairs = kc / 2, tile_words = kpairs * kRows;
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const int64_t k = k0 + 2 * kp;
    const float* row_k = p.A + k * p.lda;
    const float* row_k1 = k + 1 < p.K ? row_k + p.lda : nullptr;
    uint32_t* tile = dst + kp * kRows;
    for (int64_t i = ib; i < ie; i += 2 * kRows, tile += 2 * tile_words) {
      const __mmask16 rows = first_n(ie - i);
      const __m512 x0 = _mm512_maskz_loadu_ps(rows, row_k + i);
      const __m512 x1 = row_k1 ? _mm512_maskz_loadu_ps(rows, row_k1 + i) : _mm512_setzero_ps();
      if (sums && k < p.K) {
        __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(rows, sums + (i - ib)), x0);
        if (row_k1) sum = _mm512_add_ps(sum, x1);
        _mm512_mask_storeu_ps(sums + (i - ib), rows, sum);
      }
      const __m512i words = interleave_rows(x0, x1);  // word r: rows i + r's pair
      _mm512_mask_storeu_epi32(tile, 0x00ff, words);  // (GCC 12 warns on its own 256-bit extracts)
      if (ie - i > kRows) _mm512_mask_storeu_epi32(tile + tile_words - 8, 0xff00, words);  // words 8-15
    }
  }
}

// acc[r][v] += sum over kp of word a_r[kp] x panel[kp][16 v .. 16 v + 16), a_r[kp] at
// a[r] + kp * kp_stride. The accumulators are named variables (an array of them was kept in memory
// by GCC in the float tile: micro_tile.h).
struct Acc {
  __m512 c[kRows][2];
};

inline __m512bh words_of(__m512i v) { return reinterpret_cast<__m512bh>(v); }
inline __m512bh broadcast_word(const uint32_t* w) { return words_of(_mm512_set1_epi32(static_cast<int>(*w))); }

void accumulate(const uint32_t* const a[kRows], int64_t kp_stride, const uint32_t* panel, int64_t kpairs, Acc& acc) {
  const uint32_t *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5], *a6 = a[6], *a7 = a[7];
  __m512 c00 = acc.c[0][0], c01 = acc.c[0][1], c10 = acc.c[1][0], c11 = acc.c[1][1];
  __m512 c20 = acc.c[2][0], c21 = acc.c[2][1], c30 = acc.c[3][0], c31 = acc.c[3][1];
  __m512 c40 = acc.c[4][0], c41 = acc.c[4][1], c50 = acc.c[5][0], c51 = acc.c[5][1];
  __m512 c60 = acc.c[6][0], c61 = acc.c[6][1], c70 = acc.c[7][0], c71 = acc.c[7][1];
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const __m512bh w0 = words_of(_mm512_load_si512(panel + kp * kCols));
    const __m512bh w1 = words_of(_mm512_load_si512(panel + kp * kCols + 16));
    const int64_t at = kp * kp_stride;
    __m512bh x = broadcast_word(a0 + at);
    c00 = _mm512_dpbf16_ps(c00, x, w0), c01 = _mm512_dpbf16_ps(c01, x, w1);
    x = broadcast_word(a1 + at);
    c10 = _mm512_dpbf16_ps(c10, x, w0), c11 = _mm512_dpbf16_ps(c11, x, w1);
    x = broadcast_word(a2 + at);
    c20 = _mm512_dpbf16_ps(c20, x, w0), c21 = _mm512_dpbf16_ps(c21, x, w1);
    x = broadcast_word(a3 + at);
    c30 = _mm512_dpbf16_ps(c30, x, w0), c31 = _mm512_dpbf16_ps(c31, x, w1);
    x = broadcast_word(a4 + at);
    c40 = _mm512_dpbf16_ps(c40, x, w0), c41 = _mm512_dpbf16_ps(c41, x, w1);
    x = broadcast_word(a5 + at);
    c50 = _mm512_dpbf16_ps(c50, x, w0), c51 = _mm512_dpbf16_ps(c51, x, w1);
    x = broadcast_word(a6 + at);
    c60 = _mm512_dpbf16_ps(c60, x, w0), c61 = _mm512_dpbf16_ps(c61, x, w1);
    x = broadcast_word(a7 + at);
    c70 = _mm512_dpbf16_ps(c70, x, w0), c71 = _mm512_dpbf16_ps(c71, x, w1);
  }
  acc.c[0][0] = c00, acc.c[0][1] = c01, acc.c[1][0] = c10, acc.c[1][1] = c11;
  acc.c[2][0] = c20, acc.c[2][1] = c21, acc.c[3][0] = c30, acc.c[3][1] = c31;
  acc.c[4][0] = c40, acc.c[4][1] = c41, acc.c[5][0] = c50, acc.c[5][1] = c51;
  acc.c[6][0] = c60, acc.c[6][1] = c61, acc.c[7][0] = c70, acc.c[7][1] = c71;
}

// C tile = alpha * acc + beta * C (+ bias's columns, when not null); beta 0 never reads C.
void store_tile(const Acc& acc, int rows, int64_t cols, float alpha, float beta, const float* bias, float* C,
                int64_t ldc) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int v = 0; v < 2; ++v) {
    const int64_t n = cols - 16 * v;
    if (n <= 0) break;
    const __mmask16 m = first_n(n);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r) {
      float* c = C + r * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(va, acc.c[r][v]);
      if (beta != 0.f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), out);
      if (bias) out = _mm512_add_ps(out, b);
      _mm512_mask_storeu_ps(c, m, out);
    }
  }
}

struct BlockRange {
  int64_t i0, i1, np, col_base, k0, kc;
};

// Rows [i0, i1) of C against panels [0, np) of the packed B block over k in [k0, k0 + kc); A's rows
// are converted (or packed, transposed) an L2-sized block at a time into a_block.
void multiply_range(const Product& p, const BlockRange& br, const uint32_t* b_block, uint32_t* a_block) {
  const bool first_k_block = br.k0 == 0;
  const float beta = first_k_block ? p.beta : 1.f;
  const int64_t kpairs = br.kc / 2, rows_per_block = rows_per_a_block(k_block(p.K, p.trans_a));
  for (int64_t ib = br.i0; ib < br.i1; ib += rows_per_block) {
    const int64_t ie = std::min(br.i1, ib + rows_per_block);
    if (p.trans_a) {
      // The rows' sums once: in the first block of panels (whose thread packs these rows).
      float* sums = p.a_row_sums && br.col_base == 0 ? p.a_row_sums + ib : nullptr;
      pack_a_block_transposed(p, ib, ie, br.k0, br.kc, a_block, sums);
    } else {
      const int64_t valid = std::min(br.kc, p.K - br.k0);
      for (int64_t i = ib; i < ie; ++i) convert_row(p.A + i * p.lda + br.k0, valid, br.kc, a_block + (i - ib) * kpairs);
    }
    for (int64_t q = 0; q < br.np; ++q) {
      const uint32_t* panel = b_block + q * kpairs * kCols;
      const int64_t col0 = br.col_base + q * kCols, cols = std::min(kCols, p.N - col0);
      for (int64_t i = ib; i < ie; i += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, ie - i));
        const uint32_t* a[kRows];
        for (int r = 0; r < kRows; ++r)  // a short tile repeats row 0 of the tile and drops those results
          a[r] = p.trans_a ? a_block + (i - ib) * kpairs + r : a_block + (i - ib + (r < rows ? r : 0)) * kpairs;
        Acc acc;
        for (auto& row : acc.c) row[0] = row[1] = _mm512_setzero_ps();
        accumulate(a, p.trans_a ? kRows : 1, panel, kpairs, acc);
        store_tile(acc, rows, cols, p.alpha, beta, first_k_block && p.bias ? p.bias + col0 : nullptr,
                   p.C + i * p.ldc + col0, p.ldc);
      }
    }
  }
}

struct WorkerScratch {
  uint32_t* b_block;
  uint32_t* a_block;
};

// `packed`: op(B) packed once (pack_bf16_weights_into's layout), or null to pack it here per call.
void multiply_part(const Product& p, const uint32_t* packed, int64_t i0, int64_t i1, int64_t q0, int64_t q1,
                   const WorkerScratch& ws) {
  if (i0 >= i1 || q0 >= q1) return;
  const int64_t kc = k_block(p.K, p.trans_a), panels = ceil_div(p.N, kCols);
  const int64_t panels_per_block = packed ? q1 - q0 : std::min(q1 - q0, panels_per_b_block(kc));
  for (int64_t pb = q0; pb < q1; pb += panels_per_block) {
    const int64_t np = std::min(panels_per_block, q1 - pb);
    for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
      const int64_t kcur = std::min(kc, p.K - k0 + ((p.K - k0) & 1));  // the last block, even
      const uint32_t* b_block = packed ? packed + panels * kCols * (k0 / 2) + pb * (kcur / 2) * kCols : ws.b_block;
      if (!packed)
        pack_b_panels(p, pb, np, k0, kcur, kcur / 2 * kCols, ws.b_block);
      multiply_range(p, BlockRange{i0, i1, np, pb * kCols, k0, kcur}, b_block, ws.a_block);
    }
  }
}

// A row split with op(B) packed per call: each B block packed once, shared by the threads.
void multiply_rows_sharing_b(const Product& p, int64_t i0, int64_t i1, uint32_t* shared_b, uint32_t* a_block, int t,
                             int T, bool in_region) {
  const int64_t kc = k_block(p.K, p.trans_a), panels = ceil_div(p.N, kCols);
  const int64_t panels_per_block = std::min(panels, panels_per_b_block(kc));
  const auto block_of = [&](int64_t np, int64_t slot) { return shared_b + slot * np * (kc / 2) * kCols; };
  const auto pack = [&](int64_t pb, int64_t q0, int64_t q1, int64_t k0, int64_t kcur, int64_t slot) {
    const int64_t np = std::min(panels_per_block, panels - pb);
    pack_b_panels(p, pb + q0, q1 - q0, k0, kcur, kcur / 2 * kCols, block_of(np, slot) + q0 * kcur / 2 * kCols);
  };
  const auto multiply = [&](int64_t pb, int64_t np, int64_t k0, int64_t kcur, int64_t slot) {
    if (i0 < i1) multiply_range(p, BlockRange{i0, i1, np, pb * kCols, k0, kcur}, block_of(np, slot), a_block);
  };
  blocking::walk_shared_b_blocks(panels, panels_per_block, p.K, kc, /*even_k=*/true, t, T, in_region, pack, multiply);
}

// The product, with op(B) packed per call, or once (`packed`, for a row-major A).
void run(const Product& p, const uint32_t* packed) {
  const int64_t M = p.M, panels = ceil_div(p.N, kCols);
  // Each thread converts the rows of A it reads; weights packed once (inference) keep the panel
  // split, where each thread streams only its part of them.
  const blocking::ThreadSplit split =
      split_threads(p, panels, kRows, kParallelMin, omp_get_max_threads(), /*a_prepared_per_thread=*/!packed);
  const int64_t threads = split.threads;
  const int64_t kc = k_block(p.K, p.trans_a);
  const int64_t b_words = packed ? 0 : std::min(panels, panels_per_b_block(kc)) * kc / 2 * kCols;
  const int64_t a_words = ceil_div(rows_per_a_block(kc) * kc / 2, 16) * 16;
  // A panel split packs each thread's own panels; a row split shares one packed B block.
  const bool share_b = !packed && !split.by_panels;
  const int64_t per_thread = share_b ? a_words : b_words + a_words;
  const int64_t shared_words =
      share_b ? blocking::shared_b_panels(panels, panels_per_b_block(kc), p.K, kc) * kc / 2 * kCols : 0;
  uint32_t* scratch = caller_scratch<uint32_t>(shared_words + threads * per_thread);
  blocking::run_workers(split, [&](int t, int T) {
    if (share_b) {
      const auto [i0, i1] = share(M, kRows, t, T);
      multiply_rows_sharing_b(p, i0, i1, scratch, scratch + shared_words + t * per_thread, t, T, split.parallel);
      return;
    }
    uint32_t* mine = scratch + t * per_thread;
    const WorkerScratch ws{mine, mine + b_words};
    if (split.by_panels) {
      const auto [q0, q1] = share(panels, 1, t, T);
      multiply_part(p, packed, 0, M, q0, q1, ws);
    } else {
      const auto [i0, i1] = share(M, kRows, t, T);
      multiply_part(p, packed, i0, i1, 0, panels, ws);
    }
  });
}

}  // namespace

void gemm_avx512_bf16_unchecked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                                int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_by_beta(M, N, beta, bias, C, ldc);
  run(Product{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias}, nullptr);
}

void gemm_avx512_bf16_weight_and_bias_grad_unchecked(int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy,
                                                     const float* X, const uint16_t* X_bits, int64_t ldx, float beta,
                                                     float* dW, int64_t ldw, float* db) {
  if (M <= 0 || N <= 0 || K <= 0) return weight_and_bias_grad_in_two_calls(gemm_avx512_bf16_unchecked, M, N, K, dY,
                                                                            ld_dy, X, X_bits, ldx, beta, dW, ldw, db);
  thread_local std::vector<float> row_sums;  // zero, then each row's sum, then added to db
  row_sums.assign(static_cast<size_t>(M), 0.f);
  run(Product{true, false, M, N, K, 1.f, dY, ld_dy, X_bits ? nullptr : X, ldx, beta, dW, ldw, nullptr, X_bits,
              row_sums.data()},
      nullptr);
  for (int64_t i = 0; i < M; ++i) db[i] += row_sums[static_cast<size_t>(i)];
}

void gemm_avx512_bf16_b_bits_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_by_beta(M, N, beta, nullptr, C, ldc);
  run(Product{trans_a, false, M, N, K, alpha, A, lda, nullptr, ldb, beta, C, ldc, nullptr, B}, nullptr);
}

void gemm_packed_avx512_bf16_unchecked(const float* A, int64_t M, int64_t lda, const uint32_t* packed,
                                       int64_t out_features, int64_t in_features, const float* bias, float* C,
                                       int64_t ldc) {
  if (M <= 0 || out_features <= 0) return;
  if (in_features <= 0) return scale_by_beta(M, out_features, 0.f, bias, C, ldc);
  run(Product{false, true, M, out_features, in_features, 1.f, A, lda, nullptr, 0, 0.f, C, ldc, bias}, packed);
}

}  // namespace qkv::kernels::bf16_isa
