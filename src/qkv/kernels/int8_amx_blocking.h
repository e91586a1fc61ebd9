// gemm_int8's AMX build (int8_gemm_isa.h), written once over the machine that runs it: AMX-INT8's
// tiles (int8_gemm_amx.cpp) or their model (int8_gemm_amx_emulated.cpp, on every CPU, so that the
// blocking is tested where no AMX is at hand). Both give the AVX2 build's bits: the sums are exact
// int32 and the dequantization is the same fma.
//
// TDPBSSD multiplies signed bytes by signed bytes, four k at a time into an int32 (amx_tile_model.h),
// so the activations are quantized to int8 as the AVX2 build rounds them, with no +128 and no column
// sums. A tile is 16 rows of 64 bytes:
//   A: 16 rows of A's quantized activations, 64 k each (row stride: the row's bytes);
//   B: 16 quads of k of 16 columns, row kq = [W[j][4kq..4kq + 3] for j in 0..16): QuantizedWeights'
//      pair lines interleaved per quad (as the VNNI kernel does in registers), repacked per call for
//      the block of panels at hand (they stay in L2 while the rows pass them);
// K padded with zeros to a multiple of 64, and a block of 32 rows x 32 columns (two panels) takes
// the four C tiles. Rows past M and k past the row's bytes are read from a zeroed copy.
//
// Included by translation units built for different instruction sets: internal linkage only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "qkv/kernels/amx_tile_model.h"
#include "qkv/kernels/gemm_blocking.h"
#include "qkv/kernels/int8_gemm.h"

namespace qkv::kernels::int8_amx {

namespace {

constexpr int64_t kPanel = QuantizedWeights::kPanel;
constexpr int64_t kBlockRows = 2 * amx::kTileRows;  // two A tiles
constexpr int64_t kTileBytes = amx::kTileRowBytes;  // k per A tile row; 16 columns x 4 k per B tile row
constexpr int64_t kQuadsPerTile = kTileBytes / 4;

inline int64_t tile_k(int64_t padded) { return (padded + kTileBytes - 1) / kTileBytes * kTileBytes; }

// The calling thread's buffers (blocking::caller_scratch, kept between calls): the block's repacked
// panels, a zero-padded copy of 32 rows, the sums; each 64-byte aligned.
struct Scratch {
  int8_t* panels;
  int8_t* rows;
  int32_t* sums;
};
inline Scratch scratch_of_this_thread(int64_t panel_bytes, int64_t row_bytes) {
  const int64_t sum_bytes = kBlockRows * 2 * kPanel * 4;
  int8_t* base = blocking::caller_scratch<int8_t>(panel_bytes + row_bytes + sum_bytes);
  return {base, base + panel_bytes, reinterpret_cast<int32_t*>(base + panel_bytes + row_bytes)};
}

// C rows [0, M) x panels [p_begin, p_end) from the int8 rows Aq (row stride W.padded_in_features())
// and their scales. Machine:
//   tiles                                      amx_tile_model.h's interface, Op::Int8
//   repack_panel(W, p, quads, dst)             panel p as B tile rows: dst[kq * 64 + 4 j + i] =
//                                              W[16 p + j][4 kq + i], zero past the padded K, for kq < quads
//   store_block(sums, rows, cols, a_scales, w_scales, bias, C, ldc)
//       C[r][j] = fma(float(sums[r * 32 + j]), a_scales[r] * w_scales[j], bias ? bias[j] : 0)
template <class Machine>
void block_product(Machine& m, const int8_t* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W,
                   int64_t p_begin, int64_t p_end, const float* bias, float* C, int64_t ldc) {
  const int64_t padded = W.padded_in_features(), k_bytes = tile_k(padded), quads = k_bytes / 4;
  const int64_t panels = p_end - p_begin, panel_bytes = quads * kTileBytes;
  const Scratch s = scratch_of_this_thread(panels * panel_bytes, kBlockRows * k_bytes);
  m.tiles.configure();
  for (int64_t q = 0; q < panels; ++q) m.repack_panel(W, p_begin + q, quads, s.panels + q * panel_bytes);
  for (int64_t i = 0; i < M; i += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, M - i);
    const int8_t* a = Aq + i * padded;
    int64_t a_stride = padded;
    if (rows < kBlockRows || k_bytes != padded) {  // tiles read whole rows of 64 bytes: a padded copy
      std::memset(s.rows, 0, static_cast<size_t>(kBlockRows * k_bytes));
      for (int64_t r = 0; r < rows; ++r) std::memcpy(s.rows + r * k_bytes, a + r * padded, padded);
      a = s.rows, a_stride = k_bytes;
    }
    for (int64_t q = 0; q < panels; q += 2) {
      const int8_t* b0 = s.panels + q * panel_bytes;
      const int8_t* b1 = q + 1 < panels ? b0 + panel_bytes : b0;  // a lone panel: its twin's sums dropped
      m.tiles.begin();
      for (int64_t kq = 0; kq < quads; kq += kQuadsPerTile)
        m.tiles.step(a + kq * 4, a + amx::kTileRows * a_stride + kq * 4, a_stride, b0 + kq * kTileBytes,
                     b1 + kq * kTileBytes, kTileBytes);
      m.tiles.end(s.sums, 2 * kPanel * 4);
      const int64_t col0 = (p_begin + q) * kPanel;
      const int64_t cols = std::min(std::min(2 * kPanel, (panels - q) * kPanel), W.out_features() - col0);
      m.store_block(s.sums, static_cast<int>(rows), cols, a_scales + i, W.scales() + col0,
                    bias ? bias + col0 : nullptr, C + i * ldc + col0, ldc);
    }
  }
  m.tiles.release();
}

// block_product on a fresh Machine, in the shape int8_isa::Build takes (Aq: the int8 rows).
template <class Machine>
void block_product_on(const void* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W, int64_t p_begin,
                      int64_t p_end, const float* bias, float* C, int64_t ldc) {
  Machine m;
  block_product(m, static_cast<const int8_t*>(Aq), a_scales, M, W, p_begin, p_end, bias, C, ldc);
}

}  // namespace
}  // namespace qkv::kernels::int8_amx
