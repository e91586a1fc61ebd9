// gemm_bf16's AMX build (bf16_gemm.h), written once over the machine that runs it: AMX's tiles
// (bf16_gemm_amx.cpp, on a CPU with AMX-BF16) or a model of them (bf16_gemm_amx_emulated.cpp, on
// every CPU, so that the blocking below is tested where no AMX is at hand).
//
// The layout follows TDPBF16PS. A tile is 16 rows of 64 bytes; the instruction adds, to each of
// 16 x 16 float32 sums C[m][n], the products of 16 pairs of bf16: row m of an A tile (16 "words",
// a word being a pair of bf16, k even | k odd << 16) with column n of a B tile, whose row kp holds
// the words of 16 columns for pair kp. So:
//   op(B) is packed in panels of 32 columns, k-pair-major, panel[kp * 32 + j]: the avx512_bf16
//         build's panels, with the pairs of a K block padded with zeros to a multiple of 16; a B tile
//         is 16 pairs of half a panel (row stride 128 bytes);
//   op(A) is converted to words, the same padding, in whole tiles: for each 32 rows and each 16
//         pairs, the tile of the first 16 rows then that of the next 16, each 1 KB (row stride 64
//         bytes; a_word_index). Rows of words with a stride of the block's pairs x 4 bytes (2 KB at
//         K blocks of 1,024) ran the tile loop 10% slower on an Intel Xeon (2026-12-02);
// and a block of 32 x 32 sums takes four tiles of C (two of A, two of B: all eight tile registers).
// The blocking (K blocks, B blocks per thread, A blocks in L2, threads splitting rows or panels
// but never K) is gemm_blocked's, so a result does not depend on the thread count, nor a row of C
// on the rows around it.
//
// Included by translation units built for different instruction sets: internal linkage only.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/gemm_blocking.h"

namespace qkv::kernels::bf16_amx {

namespace {

using blocking::ceil_div;
using blocking::Product;

constexpr int64_t kTilePairs = 16;  // words in a tile's row; pair rows in a B tile
constexpr int64_t kTileRows = 16;
constexpr int64_t kBlockRows = 2 * kTileRows;  // C rows per block: two A tiles
constexpr int64_t kCols = bf16_isa::kPanelColumns;  // C columns per block: two B tiles
constexpr int64_t kBBlockBytes = int64_t{4} << 20;
constexpr int64_t kABlockBytes = 256 * 1024;
constexpr int64_t kParallelMin = 1 << 16;
static_assert(kCols == 2 * kTilePairs, "a panel is two B tiles wide");

// Words per row of a K block of kc values: kc / 2 pairs (kc is even) padded to whole tiles.
inline int64_t padded_pairs(int64_t kc) { return ceil_div(kc / 2, kTilePairs) * kTilePairs; }

// Where the word of row r (from the block's first row) and pair kp of a packed A block lies: tile
// (r / 16 within its 32 rows) of its 32 rows' chunk kp / 16, row r % 16, word kp % 16.
inline int64_t a_word_index(int64_t r, int64_t kp, int64_t pairs) {
  return (r / kBlockRows) * (kBlockRows * pairs) + (kp / kTilePairs) * (kBlockRows * kTilePairs) +
         (r % kBlockRows) / kTileRows * (kTileRows * kTilePairs) + (r % kTileRows) * kTilePairs + kp % kTilePairs;
}

inline int64_t rows_per_a_block(int64_t pairs) {
  return std::max<int64_t>(kBlockRows, kABlockBytes / (pairs * 4) / kBlockRows * kBlockRows);
}
inline int64_t panels_per_b_block(int64_t pairs) { return std::max<int64_t>(1, kBBlockBytes / (pairs * kCols * 4)); }

// acc (32 x 32 floats, row stride acc_stride) = from (the same shape; null: zeros) + 32 rows of A
// (`a`: their tiles, a_word_index; `pairs` a multiple of 16) x the panel's 32 columns, on Tiles
// (amx_tile_model.h: the model, amx_tiles.h: the hardware).
template <class Tiles>
void multiply_block(Tiles& tiles, const uint32_t* a, int64_t pairs, const uint32_t* panel, const float* from,
                    float* acc, int64_t acc_stride) {
  if (from) tiles.begin_from(from, acc_stride * 4);
  else tiles.begin();
  constexpr int64_t a_stride = kTilePairs * 4, b_stride = kCols * 4, tile_words = kTileRows * kTilePairs;
  for (int64_t kp = 0; kp < pairs; kp += kTilePairs) {
    const uint32_t* b = panel + kp * kCols;
    const uint32_t* a_tiles = a + kp * kBlockRows;  // the chunk's two tiles
    tiles.step(a_tiles, a_tiles + tile_words, a_stride, b, b + kTilePairs, b_stride);
  }
  tiles.end(acc, acc_stride * 4);
}

struct BlockRange {
  int64_t i0, i1, np, col_base, k0, kc;
};

// Rows [i0, i1) of C against panels [0, np) of the packed B block over k in [k0, k0 + kc). Machine:
//   tiles                                    the Tiles of multiply_block
//   pack_a_rows(p, i0, i1, k0, kc, pairs, dst)
//       op(A)'s rows [i0, i1) over k in [k0, k0 + kc) as words in tiles, dst[a_word_index(i - i0, kp,
//       pairs)], zero past K and past kc, and rows up to i0 + a multiple of 32 all zero;
//   pack_b_panel(p, col0, k0, kc, pairs, dst)  op(B)'s columns [col0, col0 + 32), dst[kp * 32 + j],
//       zero past N, K and kc;
//   store_block(acc, rows, cols, alpha, beta, bias, C, ldc)
//       C's rows x cols = alpha * acc + beta * C (fma) + bias (null: none); beta 0 never reads C.
template <class Machine>
void multiply_range(Machine& m, const Product& p, const BlockRange& br, const uint32_t* b_block, uint32_t* a_block,
                    float* acc) {
  const bool first_k_block = br.k0 == 0;
  const float beta = first_k_block ? p.beta : 1.f;
  const int64_t pairs = padded_pairs(br.kc);
  const int64_t rows_per_block = rows_per_a_block(padded_pairs(bf16_isa::k_block(p.K, p.trans_a)));
  for (int64_t ib = br.i0; ib < br.i1; ib += rows_per_block) {
    const int64_t ie = std::min(br.i1, ib + rows_per_block);
    m.pack_a_rows(p, ib, ie, br.k0, br.kc, pairs, a_block);
    for (int64_t q = 0; q < br.np; ++q) {
      const uint32_t* panel = b_block + q * pairs * kCols;
      const int64_t col0 = br.col_base + q * kCols, cols = std::min(kCols, p.N - col0);
      for (int64_t i = ib; i < ie; i += kBlockRows) {
        const int rows = static_cast<int>(std::min(kBlockRows, ie - i));
        const float* bias = first_k_block && p.bias ? p.bias + col0 : nullptr;
        float* c = p.C + i * p.ldc + col0;
        if (rows == kBlockRows && cols == kCols && p.alpha == 1.f && !bias && (beta == 0.f || beta == 1.f)) {
          // C's sums in the tiles themselves: no epilogue, and a later K block's sums go on from C.
          multiply_block(m.tiles, a_block + (i - ib) * pairs, pairs, panel, beta == 0.f ? nullptr : c, c, p.ldc);
          continue;
        }
        multiply_block(m.tiles, a_block + (i - ib) * pairs, pairs, panel, nullptr, acc, kCols);
        m.store_block(acc, rows, cols, p.alpha, beta, bias, c, p.ldc);
      }
    }
  }
}

struct WorkerScratch {
  uint32_t* b_block;
  uint32_t* a_block;
  float* acc;
};

// The words of the packed weights (bf16_gemm.h) that hold panel `first_panel` of the K block at k0,
// in the AMX layout: every block before k0 is a whole kc long.
inline const uint32_t* packed_block(const uint32_t* packed, int64_t panels, int64_t kc, int64_t k0, int64_t kcur,
                                    int64_t first_panel) {
  return packed + panels * kCols * (k0 / kc) * padded_pairs(kc) + first_panel * padded_pairs(kcur) * kCols;
}

// `packed`: op(B) packed once in the AMX layout (bf16_isa::pack_weights_into with 16 pairs), or null
// to pack it here per call.
template <class Machine>
void multiply_part(Machine& m, const Product& p, const uint32_t* packed, int64_t i0, int64_t i1, int64_t q0,
                   int64_t q1, const WorkerScratch& ws) {
  if (i0 >= i1 || q0 >= q1) return;
  const int64_t kc = bf16_isa::k_block(p.K, p.trans_a), panels = ceil_div(p.N, kCols);
  const int64_t panels_per_block = packed ? q1 - q0 : std::min(q1 - q0, panels_per_b_block(padded_pairs(kc)));
  for (int64_t pb = q0; pb < q1; pb += panels_per_block) {
    const int64_t np = std::min(panels_per_block, q1 - pb);
    for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
      const int64_t kcur = std::min(kc, p.K - k0 + ((p.K - k0) & 1));  // the last block, even
      const int64_t pairs = padded_pairs(kcur);
      const uint32_t* b_block = packed ? packed_block(packed, panels, kc, k0, kcur, pb) : ws.b_block;
      if (!packed)
        for (int64_t q = 0; q < np; ++q)
          m.pack_b_panel(p, (pb + q) * kCols, k0, kcur, pairs, ws.b_block + q * pairs * kCols);
      multiply_range(m, p, BlockRange{i0, i1, np, pb * kCols, k0, kcur}, b_block, ws.a_block, ws.acc);
    }
  }
}

// A row split with op(B) packed per call: each B block packed once, shared by the threads
// (blocking::walk_shared_b_blocks).
template <class Machine>
void multiply_rows_sharing_b(Machine& m, const Product& p, int64_t i0, int64_t i1, uint32_t* shared_b,
                             const WorkerScratch& ws, int t, int T, bool in_region) {
  const int64_t kc = bf16_isa::k_block(p.K, p.trans_a), panels = ceil_div(p.N, kCols);
  const int64_t panels_per_block = std::min(panels, panels_per_b_block(padded_pairs(kc)));
  const auto block_of = [&](int64_t np, int64_t slot) { return shared_b + slot * np * padded_pairs(kc) * kCols; };
  const auto pack = [&](int64_t pb, int64_t q0, int64_t q1, int64_t k0, int64_t kcur, int64_t slot) {
    const int64_t pairs = padded_pairs(kcur), np = std::min(panels_per_block, panels - pb);
    for (int64_t q = q0; q < q1; ++q)
      m.pack_b_panel(p, (pb + q) * kCols, k0, kcur, pairs, block_of(np, slot) + q * pairs * kCols);
  };
  const auto multiply = [&](int64_t pb, int64_t np, int64_t k0, int64_t kcur, int64_t slot) {
    if (i0 < i1)
      multiply_range(m, p, BlockRange{i0, i1, np, pb * kCols, k0, kcur}, block_of(np, slot), ws.a_block, ws.acc);
  };
  blocking::walk_shared_b_blocks(panels, panels_per_block, p.K, kc, /*even_k=*/true, t, T, in_region, pack, multiply);
}

// The product on `threads` workers, each with its own Machine (tiles are a thread's state).
template <class Machine>
void run(const Product& p, const uint32_t* packed, int max_threads) {
  const int64_t panels = ceil_div(p.N, kCols);
  const blocking::ThreadSplit split = blocking::split_threads(p, panels, kBlockRows, kParallelMin, max_threads);
  const int64_t threads = split.threads, pairs = padded_pairs(bf16_isa::k_block(p.K, p.trans_a));
  const int64_t b_words = packed ? 0 : std::min(panels, panels_per_b_block(pairs)) * pairs * kCols;
  const int64_t a_words = rows_per_a_block(pairs) * pairs, acc_floats = kBlockRows * kCols;
  // A panel split packs each thread's own panels; a row split shares one packed B block.
  const bool share_b = !packed && !split.by_panels;
  const int64_t per_thread = (share_b ? 0 : b_words) + a_words + acc_floats;
  const int64_t shared_words =
      share_b ? blocking::shared_b_panels(panels, panels_per_b_block(pairs), p.K, bf16_isa::k_block(p.K, p.trans_a)) *
                    pairs * kCols
              : 0;
  uint32_t* scratch = blocking::caller_scratch<uint32_t>(shared_words + threads * per_thread);
  blocking::run_workers(split, [&](int t, int T) {
    uint32_t* mine = scratch + shared_words + t * per_thread;
    const int64_t own_b = share_b ? 0 : b_words;
    const WorkerScratch ws{mine, mine + own_b, reinterpret_cast<float*>(mine + own_b + a_words)};
    Machine m;
    m.tiles.configure();
    if (share_b) {
      const auto [i0, i1] = blocking::share(p.M, kBlockRows, t, T);
      multiply_rows_sharing_b(m, p, i0, i1, scratch, ws, t, T, split.parallel);
    } else if (split.by_panels) {
      const auto [q0, q1] = blocking::share(panels, 1, t, T);
      multiply_part(m, p, packed, 0, p.M, q0, q1, ws);
    } else {
      const auto [i0, i1] = blocking::share(p.M, kBlockRows, t, T);
      multiply_part(m, p, packed, i0, i1, 0, panels, ws);
    }
    m.tiles.release();
  });
}

// gemm_bf16's contract on Machine (bf16_gemm.h): nothing for an empty C, C = beta * C + bias for
// K = 0, else the blocked product with op(B) packed per call.
template <class Machine>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return blocking::scale_by_beta(M, N, beta, bias, C, ldc);
  run<Machine>(Product{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias}, nullptr,
               omp_get_max_threads());
}

// gemm_bf16_b_bits's contract on Machine: op(B) = B given as bf16 bits.
template <class Machine>
void gemm_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return blocking::scale_by_beta(M, N, beta, nullptr, C, ldc);
  run<Machine>(Product{trans_a, false, M, N, K, alpha, A, lda, nullptr, ldb, beta, C, ldc, nullptr, B}, nullptr,
               omp_get_max_threads());
}

// gemm_bf16_packed's contract on Machine, the weights packed once in the AMX layout.
template <class Machine>
void gemm_packed(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                 int64_t in_features, const float* bias, float* C, int64_t ldc) {
  if (M <= 0 || out_features <= 0) return;
  if (in_features <= 0) return blocking::scale_by_beta(M, out_features, 0.f, bias, C, ldc);
  run<Machine>(Product{false, true, M, out_features, in_features, 1.f, A, lda, nullptr, 0, 0.f, C, ldc, bias}, packed,
               omp_get_max_threads());
}

}  // namespace
}  // namespace qkv::kernels::bf16_amx
