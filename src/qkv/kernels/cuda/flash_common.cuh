// What the flash attention kernels share (flash_attention.cu in float32, flash_attention_bf16.cu on
// the tensor cores): their arguments, kernels/attention.h's masks, scores and dropout at (i, j), the
// backward's D_i = dO_i . O_i, and the host's launch helpers. Both forms own blocks of kFlashRows
// rows (queries, or keys in the dK/dV backward).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/flash_attention.h"
#include "qkv/kernels/random.h"

namespace qkv::kernels::cuda::flash {

constexpr int kFlashRows = 64;  // rows a block owns

struct FlashArgs {
  AttentionDims d;
  AttentionMask mask;
  AttentionDropout drop;
  float divisor;      // the CPU's float sqrt(dk), or 1 (T5's unscaled scores)
  float inv_divisor;  // 1 / divisor, as the CPU's backward
  float* dbias_rows;  // the backward's (B, H, Tq, Tk) dS before the 1 / divisor (T5's bias gradient), or null
  float keep_scale;   // 1 / (1 - p)
  bool skip_causal;   // causal, no padding masks, Tk >= Tq
};

__host__ __device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__host__ __device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

// What the online softmax subtracts from a tile's scores: the running maximum, or 0 while it is still
// -inf (every key so far masked with a -inf fill: a padded row's first tile of keys). Subtracting
// -inf there would give e^(-inf - -inf) = NaN, which no later tile repairs; the CPU's row maximum
// comes from the whole row, so only a row masked everywhere is NaN there, as it stays here (0 / 0).
__device__ __forceinline__ float finite_or_zero(float m) { return m == -INFINITY ? 0.f : m; }

__device__ __forceinline__ bool row_dropped(const FlashArgs& a, int64_t b, int64_t i) {
  return a.mask.query_keep && a.mask.query_keep[b * a.d.Tq + i] == 0;
}

// kernels/attention.h's mask of score (i, j), for i < Tq and j < Tk.
__device__ __forceinline__ bool masked_at(const FlashArgs& a, int64_t b, int64_t i, int64_t j) {
  const AttentionMask& m = a.mask;
  return (m.causal && j > i + (a.d.Tk - a.d.Tq)) || (m.key_keep && m.key_keep[b * a.d.Tk + j] == 0) ||
         row_dropped(a, b, i);
}

// kernels/attention.h's score before masking: q.k / divisor, plus T5's position bias (Tq, Tk, H)
// where one is given. `inside` (i < Tq, j < Tk) guards the bias's read at the tiles' edges.
__device__ __forceinline__ float scaled_score(const FlashArgs& a, float qk, int64_t h, int64_t i, int64_t j,
                                              bool inside) {
  const float s = qk / a.divisor;
  return a.mask.bias && inside ? s + a.mask.bias[(i * a.d.Tk + j) * a.d.H + h] : s;
}

// The keys a block of query rows up to i_last needs: every key, or up to the diagonal.
__device__ __forceinline__ int64_t keys_end(const FlashArgs& a, int64_t i_last) {
  return a.skip_causal ? min64(a.d.Tk, i_last + (a.d.Tk - a.d.Tq) + 1) : a.d.Tk;
}

__device__ __forceinline__ bool dropout_kept(const FlashArgs& a, int64_t bh, int64_t i, int64_t j) {
  return dropout_keep(a.drop.seed, a.drop.offset + static_cast<uint64_t>((bh * a.d.Tq + i) * a.d.Tk + j), a.drop.p);
}

// Whether scores of rows [row0, row0 + kFlashRows) and columns [col0, col0 + count) can be masked: padding
// masks, or a causal mask the tile crosses. Queries are rows (queries_are_rows) or columns.
__device__ __forceinline__ bool tile_has_masks(const FlashArgs& a, int64_t row0, int64_t col0, int64_t count,
                                               bool queries_are_rows) {
  if (a.mask.key_keep || a.mask.query_keep) return true;
  if (!a.mask.causal) return false;
  const int64_t offset = a.d.Tk - a.d.Tq;
  // The latest key against the earliest query of the tile.
  return queries_are_rows ? col0 + count - 1 > row0 + offset : row0 + kFlashRows - 1 > col0 + offset;
}

// rowdot[r] = dO_r . O_r for every query row r = (b H + h) Tq + i (the backward's D_i), on `stream`.
void launch_rowdot(const AttentionDims& d, const float* dout, HeadsView dos, const float* out, HeadsView os,
                   float* rowdot, cudaStream_t stream);

inline FlashArgs flash_args(const AttentionDims& d, const AttentionMask& mask, const AttentionDropout& drop) {
  FlashArgs a{};
  a.d = d;
  a.mask = mask;
  a.drop = drop;
  a.divisor = mask.scale_scores ? static_cast<float>(std::sqrt(static_cast<double>(d.dk))) : 1.f;
  a.inv_divisor = 1.f / a.divisor;
  a.keep_scale = drop.p > 0.f ? 1.f / (1.f - drop.p) : 1.f;
  a.skip_causal = mask.causal && !mask.key_keep && !mask.query_keep && d.Tk >= d.Tq;
  return a;
}

// Whether each operand's tile loads may read float4s (16-byte aligned rows, dk a multiple of 4).
struct TileLoads {
  bool q, k, v, dout;
};

inline bool rows_of_16_bytes(const float* x, HeadsView xs, int64_t dk) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && xs.b % 4 == 0 && xs.h % 4 == 0 && xs.t % 4 == 0 && dk % 4 == 0;
}

// The bf16 kernels' register-level form (flash_attention_mma.cu: mma.sync m16n8k16 with the scores
// and probabilities in registers), chosen by the environment at each call: QKV_FLASH_MMA unset (the
// default) or any other value, forward and backward; "fwd", the forward only; 0, the WMMA kernels. Both forms
// write and read the same statistics (max, 1 / sum), so either backward follows either forward.
enum class MmaForm { Off, Forward, Both };
MmaForm flash_mma_form();
void flash_forward_mma(const FlashArgs& a, const float* q, HeadsView qs, const float* k, HeadsView ks, const float* v,
                       HeadsView vs, float* out, HeadsView os, float* stats, TileLoads vec4, cudaStream_t stream);
// dq, dk, dv from rowdot (launch_rowdot's D_i); a.dbias_rows (if any) already zeroed.
void flash_backward_mma(const FlashArgs& a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                        const float* rowdot, float* dq, HeadsView dqs, float* dk, HeadsView dks, float* dv,
                        HeadsView dvs, bool accumulate, TileLoads vec4, cudaStream_t stream);

inline unsigned grid_for(int64_t blocks) { return static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 30)); }

// Calls f(std::integral_constant<int, D>) for the head width that holds dk.
template <class F>
void with_width(int64_t dk, F&& f) {
  switch (flash_head_width(dk)) {
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    default: f(std::integral_constant<int, 128>{}); break;
  }
}

// Lets `kernel` take `bytes` of dynamic shared memory (past the default 48 KiB where needed).
template <class Kernel>
size_t allow_shared_bytes(Kernel* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return bytes;
}

}  // namespace qkv::kernels::cuda::flash
