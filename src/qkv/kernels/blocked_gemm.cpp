#include "qkv/kernels/blocked_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "qkv/kernels/micro_tile.h"
#include "qkv/kernels/product_clock.h"
#include "qkv/kernels/gemm_blocking.h"
#include "qkv/kernels/weight_alloc.h"

namespace qkv::kernels {

namespace {

using blocking::caller_scratch;
using blocking::ceil_div;
using blocking::Product;
using blocking::scale_by_beta;
using blocking::share;
using blocking::split_threads;

constexpr int kRows = tile::kRows;
constexpr int64_t kCols = tile::kCols;
// K is cut into near-equal blocks of at most 1024, 512 for a transposed A (its packed row block
// must stay in L2). Fewer blocks mean fewer passes over C; the panel (64 KB at 1024) need not stay
// in L1, L2 feeds the tile fast enough: one thread ran 100 GFLOP/s with blocks of 320, 107 with 1024.
constexpr int64_t kMaxKBlock = 1024, kMaxKBlockTransposedA = 512;
// Panels a thread packs at once (its B block, read by every row tile: L3-sized).
constexpr int64_t kBBlockBytes = int64_t{4} << 20;
// Rows of A per block, which each panel of the B block streams past (L2-sized, as gemm_packed).
constexpr int64_t kABlockBytes = 256 * 1024;
// Below this many multiply-adds one thread does the product: forking costs a few microseconds.
constexpr int64_t kBlockedParallelMin = 1 << 16;


// K's block length: depends on K and op(A) alone, so every element's sum has the same blocks for
// any M, N or thread count.
int64_t k_block(int64_t K, bool trans_a) {
  const int64_t max_block = trans_a ? kMaxKBlockTransposedA : kMaxKBlock;
  return ceil_div(K, ceil_div(K, max_block));
}

int64_t rows_per_a_block(int64_t kc) { return std::max<int64_t>(kRows, kABlockBytes / (kc * 4) / kRows * kRows); }

int64_t panels_per_b_block(int64_t kc) { return std::max<int64_t>(1, kBBlockBytes / (kc * kCols * 4)); }

// One worker's scratch: its packed B block and, for a transposed A, its packed A block.
struct WorkerScratch {
  float* b_block;
  float* a_block;
};

// dst[i * dst_stride + r] = src[r * src_stride + i] for r, i < 8.
inline void transpose_8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {  // quads of rows: each 128-bit lane holds one column's 4 values
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {  // columns i and i + 4: the low and high lanes of rows 0-3 and 4-7
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// Panel of op(B)'s columns [col0, col0 + cols) over k in [k0, k0 + kc): dst[k * 16 + j], columns
// past `cols` zero.
void pack_b_panel(const Product& p, int64_t col0, int64_t cols, int64_t k0, int64_t kc, float* dst) {
  if (!p.trans_b) {  // B stored (K, N): each k is a contiguous run of the panel's columns
    if (cols == kCols) {  // two vectors a k (a memcpy call for 64 bytes took 22% of a dY^T X product)
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = p.B + (k0 + k) * p.ldb + col0;
        _mm256_store_ps(dst + k * kCols, _mm256_loadu_ps(src));
        _mm256_store_ps(dst + k * kCols + 8, _mm256_loadu_ps(src + 8));
      }
      return;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = p.B + (k0 + k) * p.ldb + col0;
      float* d = dst + k * kCols;
      for (int64_t j = 0; j < kCols; ++j) d[j] = j < cols ? src[j] : 0.f;
    }
    return;
  }
  // B stored (N, K): column j of op(B) is row col0 + j of B, read along k. A full panel goes by
  // 8 x 8 transposes in registers (scalar copies were a third of an attention head's Q K^T).
  int64_t k_done = 0;
  if (cols == kCols) {
    for (; k_done + 8 <= kc; k_done += 8)
      for (int64_t half = 0; half < kCols; half += 8)
        transpose_8x8(p.B + (col0 + half) * p.ldb + k0 + k_done, p.ldb, dst + k_done * kCols + half, kCols);
    if (k_done == kc) return;
  }
  for (int64_t j = 0; j < cols; ++j) {
    const float* src = p.B + (col0 + j) * p.ldb + k0;
    for (int64_t k = k_done; k < kc; ++k) dst[k * kCols + j] = src[k];
  }
  for (int64_t j = cols; j < kCols; ++j)
    for (int64_t k = 0; k < kc; ++k) dst[k * kCols + j] = 0.f;
}

// Panels [pb, pb + np) of op(B) over k in [k0, k0 + kc), panel q at b_block + q * kc * 16. A B
// stored (K, N) is read a row at a time across the block's full panels (one stream, which the
// prefetcher follows; panel by panel, each k was a new line 4 KB on: 14% of a dY^T X product).
void pack_b_block(const Product& p, int64_t pb, int64_t np, int64_t k0, int64_t kc, float* b_block) {
  // The block's full panels, streamed; the rest (op(B)'s partial last panel, or every panel of a
  // B stored (N, K)) go through pack_b_panel.
  const int64_t full = p.trans_b ? 0 : std::min(np, p.N / kCols - pb);
  for (int64_t k = 0; k < kc && full > 0; ++k) {
    const float* src = p.B + (k0 + k) * p.ldb + pb * kCols;
    float* dst = b_block + k * kCols;
    for (int64_t q = 0; q < full; ++q) {
      _mm256_store_ps(dst + q * kc * kCols, _mm256_loadu_ps(src + q * kCols));
      _mm256_store_ps(dst + q * kc * kCols + 8, _mm256_loadu_ps(src + q * kCols + 8));
    }
  }
  for (int64_t q = full; q < np; ++q) {
    const int64_t col0 = (pb + q) * kCols;
    pack_b_panel(p, col0, std::min(kCols, p.N - col0), k0, kc, b_block + q * kc * kCols);
  }
}

// op(A) = A^T (A stored (K, M)): rows [ib, ie) over k in [k0, k0 + kc), packed as tiles of 6 rows,
// tile t at dst + t * kc * 6, k-major as the tile reads them (dst[k * 6 + r]); rows past ie zero.
// Each k reads the block's run of row k of A in one stream (tile by tile, each k was a line 4 KB on,
// and scalar copies: 10-16% of a dY^T X product). (Reading A^T's columns in place instead, k_stride
// lda, ran at 0.8x OpenBLAS for M in the thousands: one page per k.)
void pack_a_block_transposed(const Product& p, int64_t ib, int64_t ie, int64_t k0, int64_t kc, float* dst) {
  const int64_t full_tiles = (ie - ib) / kRows, tail = (ie - ib) % kRows;
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = p.A + (k0 + k) * p.lda + ib;
    float* d = dst + k * kRows;
    for (int64_t t = 0; t < full_tiles; ++t, src += kRows, d += kc * kRows) {
      _mm_storeu_ps(d, _mm_loadu_ps(src));
      _mm_storeu_si64(d + 4, _mm_loadu_si64(src + 4));  // unaligned 8-byte moves (floats are 4-aligned)
    }
    if (tail)
      for (int r = 0; r < kRows; ++r) d[r] = r < tail ? src[r] : 0.f;
  }
}

// C tile = alpha * acc + beta * C (+ bias, the tile's columns of it, when not null); beta 0 never
// reads C (it may hold NaN).
void store_tile(const tile::Acc& acc, int rows, int64_t cols, float alpha, float beta, const float* bias, float* C,
                int64_t ldc) {
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  __m256 bias_lo = _mm256_setzero_ps(), bias_hi = _mm256_setzero_ps();
  if (bias) {
    alignas(32) float b[kCols] = {};
    std::memcpy(b, bias, static_cast<size_t>(cols) * sizeof(float));
    bias_lo = _mm256_load_ps(b), bias_hi = _mm256_load_ps(b + 8);
  }
  for (int r = 0; r < rows; ++r) {
    float* c = C + r * ldc;
    alignas(32) float tmp[kCols];
    float* out = cols == kCols ? c : tmp;
    if (cols != kCols && beta != 0.f) std::memcpy(tmp, c, static_cast<size_t>(cols) * sizeof(float));
    __m256 lo = acc.lo[r], hi = acc.hi[r];
    if (alpha != 1.f) lo = _mm256_mul_ps(va, lo), hi = _mm256_mul_ps(va, hi);  // 1 * x is x: the same bits
    if (beta != 0.f) {
      lo = _mm256_fmadd_ps(vb, _mm256_loadu_ps(out), lo);
      hi = _mm256_fmadd_ps(vb, _mm256_loadu_ps(out + 8), hi);
    }
    if (bias) lo = _mm256_add_ps(lo, bias_lo), hi = _mm256_add_ps(hi, bias_hi);
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    if (cols != kCols) std::memcpy(c, tmp, static_cast<size_t>(cols) * sizeof(float));
  }
}

// Rows [i0, i1) of C against panels [0, np) of the packed B block (panel q at b_block + q * kc * 16,
// C columns from col_base + q * 16), over k in [k0, k0 + kc). The first K block applies beta; the
// later ones add to what the earlier ones stored. A's rows are read in place; a transposed A is
// packed a row block at a time.
struct BlockRange {
  int64_t i0, i1, np, col_base, k0, kc;
};

// The 6 x 32 tile's sums of two panels (acc, 6 x 32 floats) as the two 6 x 16 tiles store_tile takes.
std::pair<tile::Acc, tile::Acc> split_pair(const float* acc) {
  std::pair<tile::Acc, tile::Acc> halves;
  for (int r = 0; r < kRows; ++r) {
    halves.first.lo[r] = _mm256_load_ps(acc + r * 2 * kCols);
    halves.first.hi[r] = _mm256_load_ps(acc + r * 2 * kCols + 8);
    halves.second.lo[r] = _mm256_load_ps(acc + r * 2 * kCols + 16);
    halves.second.hi[r] = _mm256_load_ps(acc + r * 2 * kCols + 24);
  }
  return halves;
}

// The height of the tile at row i of [ib, ie): a transposed A keeps its packing's grid of 6 rows
// (a short tile at the block's end only); A's rows read in place take shorter last tiles rather
// than a padded 6-row one (a row's sums do not depend on its tile's height: micro_tile.h).
int tile_height(const Product& p, int64_t left) {
  return p.trans_a ? static_cast<int>(std::min<int64_t>(kRows, left)) : tile::rows_of_next_tile(left);
}

// The tile's row pointers at k = br.k0: into the packed A block (k_stride 6), or A's rows in place
// (k_stride 1; rows past `rows` repeat the first).
void tile_rows(const Product& p, const BlockRange& br, int64_t ib, int64_t i, int rows, const float* a_packed,
               const float* a[kRows]) {
  for (int r = 0; r < kRows; ++r)
    a[r] = p.trans_a ? a_packed + (i - ib) * br.kc + r : p.A + (i + (r < rows ? r : 0)) * p.lda + br.k0;
}

// Stores a 6 x 32 tile's sums (row r at sums + 32 r) into C's columns [col0, col0 + 32).
void store_pair(const Product& p, const float* sums, int rows, int64_t col0, float beta, const float* bias, float* c) {
  const auto [first, second] = split_pair(sums);
  store_tile(first, rows, std::min(kCols, p.N - col0), p.alpha, beta, bias, c, p.ldc);
  store_tile(second, rows, std::min(kCols, p.N - col0 - kCols), p.alpha, beta, bias ? bias + kCols : nullptr,
             c + kCols, p.ldc);
}

void multiply_range(const Product& p, wide_tile::PairAccumulate pair, const BlockRange& br, const float* b_block,
                    float* a_packed) {
  const bool first_k_block = br.k0 == 0;
  const float beta = first_k_block ? p.beta : 1.f;
  const int64_t k_stride = p.trans_a ? kRows : 1;
  // Sized by K's full block, as the scratch for a packed A^T block is: the last, shorter K block
  // would allow more rows, and they overran that scratch into the other thread's packed B (wrong
  // sums for K = 3200, the seed's micro-batches) and past its end.
  const int64_t rows_per_block = rows_per_a_block(k_block(p.K, p.trans_a));
  for (int64_t ib = br.i0; ib < br.i1; ib += rows_per_block) {
    const int64_t ie = std::min(br.i1, ib + rows_per_block);
    if (p.trans_a) pack_a_block_transposed(p, ib, ie, br.k0, br.kc, a_packed);
    for (int64_t q = 0; q < br.np; q += pair && q + 1 < br.np ? 2 : 1) {
      const float* panel = b_block + q * br.kc * kCols;
      const int64_t col0 = br.col_base + q * kCols, cols = std::min(kCols, p.N - col0);
      const bool two = pair && q + 1 < br.np;
      const float* bias = first_k_block && p.bias ? p.bias + col0 : nullptr;
      for (int64_t i = ib, rows = 0; i < ie; i += rows) {
        rows = tile_height(p, ie - i);
        const float* a[kRows];
        tile_rows(p, br, ib, i, static_cast<int>(rows), a_packed, a);
        float* c = p.C + i * p.ldc + col0;
        if (two) {  // panels q and q + 1 at once, each element the same FMAs as below
          alignas(64) float sums[kRows * 2 * kCols] = {};  // 64: zmm loads and stores split no cache line
          pair(static_cast<int>(rows), a, k_stride, panel, panel + br.kc * kCols, br.kc, sums);
          store_pair(p, sums, static_cast<int>(rows), col0, beta, bias, c);
          continue;
        }
        tile::Acc acc = tile::splat(_mm256_setzero_ps(), _mm256_setzero_ps());
        tile::accumulate_rows(static_cast<int>(rows), a, k_stride, panel, br.kc, acc, cols <= 8);
        store_tile(acc, static_cast<int>(rows), cols, p.alpha, beta, bias, c, p.ldc);
      }
    }
  }
}

// One thread's part of C: rows [i0, i1) x panels [q0, q1), with its own packed copy of those panels
// (so threads never wait for each other).
void multiply_part(const Product& p, wide_tile::PairAccumulate pair, int64_t i0, int64_t i1, int64_t q0, int64_t q1,
                   const WorkerScratch& scratch) {
  if (i0 >= i1 || q0 >= q1) return;
  const int64_t kc = k_block(p.K, p.trans_a);
  const int64_t panels_per_block = std::min(q1 - q0, panels_per_b_block(kc));
  float* b_block = scratch.b_block;
  for (int64_t pb = q0; pb < q1; pb += panels_per_block) {
    const int64_t np = std::min(panels_per_block, q1 - pb);
    for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
      const int64_t kcur = std::min(kc, p.K - k0);
      pack_b_block(p, pb, np, k0, kcur, b_block);
      multiply_range(p, pair, BlockRange{i0, i1, np, pb * kCols, k0, kcur}, b_block, scratch.a_block);
    }
  }
}

}  // namespace

void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  gemm_blocked_with_tile(wide_tile::chosen_or_null(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                         bias);
}

void gemm_blocked_with_tile(wide_tile::PairAccumulate pair, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                            float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  const product_clock::Scope clock("f32", M, N, K, trans_a, trans_b);
  if (K <= 0) return scale_by_beta(M, N, beta, bias, C, ldc);
  const Product p{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias};
  const int64_t panels = ceil_div(N, kCols);
  const blocking::ThreadSplit split = split_threads(p, panels, kRows, kBlockedParallelMin, omp_get_max_threads());
  const int64_t threads = split.threads;
  // Each worker's slice of the caller's scratch, in whole cache lines.
  const int64_t kc = k_block(K, trans_a);
  const int64_t b_floats = std::min(panels, panels_per_b_block(kc)) * kc * kCols;
  const int64_t a_floats = trans_a ? ceil_div(rows_per_a_block(kc) * kc, kCols) * kCols : 0;
  const int64_t worker_floats = b_floats + a_floats;
  float* scratch = caller_scratch<float>(threads * worker_floats);
  blocking::run_workers(split, [&](int t, int T) {
    float* mine = scratch + t * worker_floats;
    const WorkerScratch ws{mine, trans_a ? mine + b_floats : nullptr};
    if (split.by_panels) {
      const auto [q0, q1] = share(panels, 1, t, T);
      multiply_part(p, pair, 0, M, q0, q1, ws);
    } else {
      const auto [i0, i1] = share(M, kRows, t, T);
      multiply_part(p, pair, i0, i1, 0, panels, ws);
    }
  });
}

}  // namespace qkv::kernels
