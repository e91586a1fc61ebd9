// Attention on the GPU without the (B, H, Tq, Tk) softmax: FlashAttention's online softmax (Dao et
// al. 2022), in float32 so that it agrees with the CPU's attention to float32 rounding.
//
// Forward, per query row i: running max m, running sum l, running output o over key tiles,
//   s_j = q_i . k_j / sqrt(dk)  (the fill where masked),  m' = max(m, max_j s_j),
//   l = l e^(m - m') + sum_j e^(s_j - m'),  o = o e^(m - m') + sum_j dropout(e^(s_j - m')) v_j,
// and at the end O_i = o / l. The row keeps (m, 1 / l): P_ij = e^(s_ij - m) (1 / l) again, as the
// CPU's softmax_row computes it (exp(x - max) times 1 / sum). Keeping m and 1 / l rather than one
// log-sum-exp matters for fully masked rows: with the fill -1e9, m + log(l) rounds back to -1e9.
//
// T5's attention: s_j = q_i . k_j (no division) + bias(i, j, h); the backward then also writes the
// bias's gradient per head, P (dP - D) where not masked, for the ops to sum over the batch.
//
// Backward, with Pd = dropout(P), dP = dropout_mask(dO V^T) and D_i = sum_j dP_ij P_ij:
//   D_i = dO_i . O_i          (O = Pd V, so dO_i . O_i = sum_j P_ij dropout_mask(dO_i . v_j))
//   dS_ij = P_ij (dP_ij - D_i) / sqrt(dk), 0 where masked (kernels/attention.h)
//   dQ_i = sum_j dS_ij k_j;   dK_j = sum_i dS_ij q_i;   dV_j = sum_i Pd_ij dO_i
// in two kernels, neither with atomics (so the bits do not depend on scheduling): one per block of
// query rows for dQ, one per block of key rows for dK and dV; each recomputes P from q, k and (m, 1/l).
//
// Every product is a tile product in shared memory, as in a GEMM: a block of 256 threads owns 64
// rows (queries in the forward and dQ, keys in dK/dV), a thread 4 of them, and the other side passes
// by in tiles of 32 (keys, or queries), a thread holding 2 of each tile's columns. Operands sit in
// shared memory k-major (the summed index outermost), so that each step of a product reads a float4
// of 4 rows and the thread's columns: 8 multiply-adds per load. Head widths dk <= D for D = 32, 64
// or 128 (zeros past dk).
//
// Causal masks without padding masks: tiles wholly above the diagonal are skipped. Their P is exactly
// 0 there (e^(fill - m) underflows, each row having key 0 unmasked), so the result is the same.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/flash_attention.h"
#include "qkv/kernels/cuda/flash_common.cuh"
#include "qkv/kernels/random.h"

namespace qkv::kernels::cuda {
namespace {

using namespace flash;

constexpr int kThreads = 256;  // 16 x 16: ty = threadIdx.x / 16 picks 4 rows, tx 2 columns of a tile
constexpr int kRows = kFlashRows;  // rows a block owns
constexpr int kTile = 32;      // columns of the other side per tile
constexpr int kLdRows = kRows + 4;  // k-major layouts of 64 rows: rows + 4 keeps float4 alignment
constexpr int kLdTile = kTile + 4;


// Row-major tiles in shared memory have rows of D + 4 floats: a float4 store per lane over rows then
// spreads over the banks, and float4 reads stay aligned.
template <int D>
constexpr int row_ld() {
  return D + 4;
}

// The thread's share of a tile of `kRowsOfTile` rows of head (b, h), held in registers between its
// load from global memory and its store to shared memory, so that the next tile's loads are in flight
// while the current one is multiplied. Each thread takes float4 chunks (4 consecutive columns of a
// row; lanes run over rows), zeros past `count` rows or dk columns.
template <int D, int kRowsOfTile>
struct TileInRegisters {
  static constexpr int kChunks = kRowsOfTile * (D / 4) / kThreads;
  static_assert(kChunks >= 1 && kRowsOfTile * (D / 4) % kThreads == 0, "a tile's chunks spread evenly");
  float v[kChunks][4];

  __device__ static int row_of(int n) { return (threadIdx.x + n * kThreads) % kRowsOfTile; }
  __device__ static int col_of(int n) { return 4 * ((threadIdx.x + n * kThreads) / kRowsOfTile); }

  __device__ void load(const float* x, HeadsView xs, int64_t b, int64_t h, int64_t first, int64_t count,
                       int64_t dk) {
#pragma unroll
    for (int n = 0; n < kChunks; ++n) {
      const int r = row_of(n), c0 = col_of(n);
      const float* src = x + b * xs.b + h * xs.h + (first + r) * xs.t;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[n][e] = r < count && c0 + e < dk ? src[c0 + e] : 0.f;
    }
  }
  // dst[c * ld + r]: k-major (columns outermost).
  __device__ void store_k_major(float* dst, int ld) const {
#pragma unroll
    for (int n = 0; n < kChunks; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[(col_of(n) + e) * ld + row_of(n)] = v[n][e];
  }
  // dst[r * row_ld<D>() + c]: row-major.
  __device__ void store_row_major(float* dst) const {
#pragma unroll
    for (int n = 0; n < kChunks; ++n)
      *reinterpret_cast<float4*>(dst + row_of(n) * row_ld<D>() + col_of(n)) = make_float4(v[n][0], v[n][1], v[n][2], v[n][3]);
  }
};

// dst[c * ld + r] = x[first + r][c] of head (b, h) for r < rows, c < D: k-major (columns outermost),
// zeros past `count` rows or dk columns. Lanes run over rows; all threads of the block call it.
template <int D>
__device__ void load_k_major(float* dst, int ld, int rows, const float* x, HeadsView xs, int64_t b, int64_t h,
                             int64_t first, int64_t count, int64_t dk) {
  for (int idx = threadIdx.x; idx < rows * (D / 4); idx += kThreads) {
    const int r = idx % rows, c0 = 4 * (idx / rows);
    const float* src = x + b * xs.b + h * xs.h + (first + r) * xs.t;
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[(c0 + e) * ld + r] = r < count && c0 + e < dk ? src[c0 + e] : 0.f;
  }
}

template <int N>
__device__ __forceinline__ void load_columns(float (&v)[N], const float* p) {
  if constexpr (N == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x, v[1] = t.y;
  } else {
#pragma unroll
    for (int n = 0; n < N; n += 4) {
      const float4 t = *reinterpret_cast<const float4*>(p + n);
      v[n] = t.x, v[n + 1] = t.y, v[n + 2] = t.z, v[n + 3] = t.w;
    }
  }
}

// acc[r][c] += sum_{k < K} A[k][4 ty + r] * B[k][N tx + c]: the thread's 4 x N part of a product whose
// operands are k-major in shared memory (leading dimensions lda, ldb).
template <int N, int K>
__device__ __forceinline__ void tile_product(float (&acc)[4][N], const float* A, int lda, const float* B, int ldb,
                                             int k_count = K) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 8
  for (int k = 0; k < k_count; ++k) {
    const float4 a4 = *reinterpret_cast<const float4*>(A + k * lda + 4 * ty);
    const float a[4] = {a4.x, a4.y, a4.z, a4.w};
    float bv[N];
    load_columns(bv, B + k * ldb + N * tx);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < N; ++c) acc[r][c] = fmaf(a[r], bv[c], acc[r][c]);
  }
}

template <int R, int N>
__device__ __forceinline__ void zero(float (&acc)[R][N]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = 0.f;
}

// v over the 16 threads of a row group (the lanes that share ty: lanes 0-15 or 16-31 of a warp).
template <class Op>
__device__ __forceinline__ float across_row(float v, Op op) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Stores the thread's 4 x N accumulator rows (row0 + 4 ty + r, columns N tx + c < dk) of head (b, h).
template <int N>
__device__ __forceinline__ void store_rows(float* x, HeadsView xs, int64_t b, int64_t h, int64_t row0,
                                           int64_t rows_end, int64_t dk, const float (&acc)[4][N],
                                           const float (&scale)[4], bool accumulate) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t row = row0 + 4 * ty + r;
    if (row >= rows_end) continue;
    float* dst = x + b * xs.b + h * xs.h + row * xs.t;
#pragma unroll
    for (int c = 0; c < N; ++c) {
      const int64_t col = N * tx + c;
      if (col < dk) dst[col] = accumulate ? dst[col] + acc[r][c] * scale[r] : acc[r][c] * scale[r];
    }
  }
}

// Shared memory of each kernel, in floats (the layouts are in the kernels).
template <int D>
constexpr int forward_floats() {
  return D * kLdRows + D * kLdTile + kTile * row_ld<D>() + kTile * kLdRows;
}
template <int D>
constexpr int dq_floats() {
  return 2 * D * kLdRows + 2 * D * kLdTile + kTile * row_ld<D>() + kTile * kLdRows;
}
template <int D>
constexpr int dkv_floats() {
  return 2 * D * kLdRows + 2 * D * kLdTile + 2 * kTile * row_ld<D>() + 2 * kTile * kLdRows + 3 * kTile;
}


// kPrefetch: the next tile's loads are issued before the current tile's products (they overlap, at
// the cost of registers, hence of resident blocks); without it each tile is loaded when it is needed.
template <int D, bool kPrefetch>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(FlashArgs a, const float* q, HeadsView qs, const float* k, HeadsView ks, const float* v,
                         HeadsView vs, float* out, HeadsView os, float* stats) {
  constexpr int N = D / 16;  // output columns per thread
  extern __shared__ __align__(16) float smem[];
  float* Qt = smem;                  // [D][kLdRows]
  float* Kt = Qt + D * kLdRows;      // [D][kLdTile]
  float* Vr = Kt + D * kLdTile;      // [kTile][row_ld]
  float* Pt = Vr + kTile * row_ld<D>();  // [kTile][kLdRows]
  const AttentionDims& d = a.d;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t blocks_per_head = (d.Tq + kRows - 1) / kRows;
  TileInRegisters<D, kTile> next_k, next_v;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H, i0 = (blk % blocks_per_head) * kRows;
    const int64_t j_end = keys_end(a, min64(i0 + kRows, d.Tq) - 1);
    __syncthreads();  // the previous block's readers are done
    load_k_major<D>(Qt, kLdRows, kRows, q, qs, b, h, i0, d.Tq - i0, d.dk);
    if constexpr (kPrefetch) {
      next_k.load(k, ks, b, h, 0, min64(kTile, j_end), d.dk);
      next_v.load(v, vs, b, h, 0, min64(kTile, j_end), d.dk);
    }
    float o[4][N], m[4], l[4];
    zero(o);
#pragma unroll
    for (int r = 0; r < 4; ++r) m[r] = -INFINITY, l[r] = 0.f;
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      const int64_t count = min64(kTile, j_end - j0);
      __syncthreads();  // the previous tile's readers are done
      if constexpr (!kPrefetch) {
        next_k.load(k, ks, b, h, j0, count, d.dk);
        next_v.load(v, vs, b, h, j0, count, d.dk);
      }
      next_k.store_k_major(Kt, kLdTile);
      next_v.store_row_major(Vr);
      __syncthreads();
      if (kPrefetch && j0 + kTile < j_end) {  // the next tile's loads run while this one is multiplied
        next_k.load(k, ks, b, h, j0 + kTile, min64(kTile, j_end - j0 - kTile), d.dk);
        next_v.load(v, vs, b, h, j0 + kTile, min64(kTile, j_end - j0 - kTile), d.dk);
      }
      float s[4][2];
      zero(s);
      tile_product<2, D>(s, Qt, kLdRows, Kt, kLdTile);
      const bool masks = tile_has_masks(a, i0, j0, count, true);
      float p[4][2];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t i = i0 + 4 * ty + r;
        float tile_max = -INFINITY;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int jj = 2 * tx + c;
          const bool inside = i < d.Tq && jj < count;
          s[r][c] = masks && inside && masked_at(a, b, i, j0 + jj) ? a.mask.fill
                                                                   : scaled_score(a, s[r][c], h, i, j0 + jj, inside);
          if (jj < count) tile_max = fmaxf(tile_max, s[r][c]);
        }
        tile_max = across_row(tile_max, detail::Max{});
        const float m_new = fmaxf(m[r], tile_max);
        const float m_sub = finite_or_zero(m_new);
        const float rescale = expf(m[r] - m_sub);  // 0 on the first tile (m = -inf)
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int jj = 2 * tx + c;
          const float e = jj < count ? expf(s[r][c] - m_sub) : 0.f;
          sum += e;
          p[r][c] = a.drop.p > 0.f && i < d.Tq && jj < count
                        ? (dropout_kept(a, bh, i, j0 + jj) ? e * a.keep_scale : 0.f)
                        : e;
        }
        l[r] = l[r] * rescale + across_row(sum, detail::Sum{});
        m[r] = m_new;
#pragma unroll
        for (int c = 0; c < N; ++c) o[r][c] *= rescale;
      }
#pragma unroll
      for (int c = 0; c < 2; ++c)
        *reinterpret_cast<float4*>(Pt + (2 * tx + c) * kLdRows + 4 * ty) = make_float4(p[0][c], p[1][c], p[2][c], p[3][c]);
      __syncthreads();
      tile_product<N, kTile>(o, Pt, kLdRows, Vr, row_ld<D>(), static_cast<int>(count));
    }
    float inv[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) inv[r] = 1.f / l[r];
    store_rows<N>(out, os, b, h, i0, d.Tq, d.dk, o, inv, false);
    if (stats && tx == 0)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t i = i0 + 4 * ty + r;
        if (i < d.Tq) {
          stats[2 * (bh * d.Tq + i)] = m[r];
          stats[2 * (bh * d.Tq + i) + 1] = inv[r];
        }
      }
  }
}


// D_i = dO_i . O_i, a warp per row.
__global__ void rowdot_kernel(AttentionDims d, const float* dout, HeadsView dos, const float* out, HeadsView os,
                              float* rowdot) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; r < d.B * d.H * d.Tq; r += warps) {
    const int64_t i = r % d.Tq, bh = r / d.Tq, b = bh / d.H, h = bh % d.H;
    const float* g = dout + b * dos.b + h * dos.h + i * dos.t;
    const float* y = out + b * os.b + h * os.h + i * os.t;
    float s = 0.f;
    for (int64_t c = lane; c < d.dk; c += 32) s = fmaf(g[c], y[c], s);
    s = detail::warp_sum(s);
    if (lane == 0) rowdot[r] = s;
  }
}

// dQ for a block of 64 query rows; keys pass by in tiles of 32.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                             const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                             const float* rowdot, float* dq, HeadsView dqs, bool accumulate) {
  constexpr int N = D / 16;
  extern __shared__ __align__(16) float smem[];
  float* Qt = smem;                    // [D][kLdRows]
  float* Gt = Qt + D * kLdRows;        // dO, [D][kLdRows]
  float* Kt = Gt + D * kLdRows;        // [D][kLdTile]
  float* Vt = Kt + D * kLdTile;        // [D][kLdTile]
  float* Kr = Vt + D * kLdTile;        // [kTile][row_ld]
  float* St = Kr + kTile * row_ld<D>();  // dS, [kTile][kLdRows]
  const AttentionDims& d = a.d;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t blocks_per_head = (d.Tq + kRows - 1) / kRows;
  TileInRegisters<D, kTile> next_k, next_v;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H, i0 = (blk % blocks_per_head) * kRows;
    const int64_t j_end = keys_end(a, min64(i0 + kRows, d.Tq) - 1);
    __syncthreads();
    load_k_major<D>(Qt, kLdRows, kRows, q, qs, b, h, i0, d.Tq - i0, d.dk);
    load_k_major<D>(Gt, kLdRows, kRows, dout, dos, b, h, i0, d.Tq - i0, d.dk);
    next_k.load(k, ks, b, h, 0, min64(kTile, j_end), d.dk);
    next_v.load(v, vs, b, h, 0, min64(kTile, j_end), d.dk);
    float m[4], inv[4], Di[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + 4 * ty + r;
      m[r] = i < d.Tq ? stats[2 * (bh * d.Tq + i)] : 0.f;
      inv[r] = i < d.Tq ? stats[2 * (bh * d.Tq + i) + 1] : 0.f;
      Di[r] = i < d.Tq ? rowdot[bh * d.Tq + i] : 0.f;
    }
    float acc[4][N];
    zero(acc);
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      const int64_t count = min64(kTile, j_end - j0);
      __syncthreads();
      next_k.store_k_major(Kt, kLdTile);
      next_k.store_row_major(Kr);
      next_v.store_k_major(Vt, kLdTile);
      __syncthreads();
      if (j0 + kTile < j_end) {
        next_k.load(k, ks, b, h, j0 + kTile, min64(kTile, j_end - j0 - kTile), d.dk);
        next_v.load(v, vs, b, h, j0 + kTile, min64(kTile, j_end - j0 - kTile), d.dk);
      }
      float s[4][2], dp[4][2];
      zero(s);
      zero(dp);
      tile_product<2, D>(s, Qt, kLdRows, Kt, kLdTile);
      tile_product<2, D>(dp, Gt, kLdRows, Vt, kLdTile);
      const bool masks = tile_has_masks(a, i0, j0, count, true);
      float ds[4][2];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t i = i0 + 4 * ty + r;
          const int jj = 2 * tx + c;
          const bool inside = i < d.Tq && jj < count;
          const bool live = inside && !(masks && masked_at(a, b, i, j0 + jj));
          const float p = expf(scaled_score(a, s[r][c], h, i, j0 + jj, inside) - m[r]) * inv[r];
          float g = dp[r][c];
          if (a.drop.p > 0.f) g = live && dropout_kept(a, bh, i, j0 + jj) ? g * a.keep_scale : 0.f;
          // The CPU's order: dS = (P (dP - D)) / divisor, the bias's gradient the part in brackets.
          const float dbias = live ? p * (g - Di[r]) : 0.f;
          if (a.dbias_rows && inside) a.dbias_rows[(bh * d.Tq + i) * d.Tk + j0 + jj] = dbias;
          ds[r][c] = dbias * a.inv_divisor;
        }
#pragma unroll
      for (int c = 0; c < 2; ++c)
        *reinterpret_cast<float4*>(St + (2 * tx + c) * kLdRows + 4 * ty) =
            make_float4(ds[0][c], ds[1][c], ds[2][c], ds[3][c]);
      __syncthreads();
      tile_product<N, kTile>(acc, St, kLdRows, Kr, row_ld<D>(), static_cast<int>(count));
    }
    const float one[4] = {1.f, 1.f, 1.f, 1.f};
    store_rows<N>(dq, dqs, b, h, i0, d.Tq, d.dk, acc, one, accumulate);
  }
}

// dK and dV for a block of 64 key rows; queries, their gradients and statistics pass by in tiles of 32.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkv_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                              const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                              const float* rowdot, float* dk, HeadsView dks, float* dv, HeadsView dvs,
                              bool accumulate) {
  constexpr int N = D / 16;
  extern __shared__ __align__(16) float smem[];
  float* Kt = smem;                      // [D][kLdRows]
  float* Vt = Kt + D * kLdRows;          // [D][kLdRows]
  float* Qt = Vt + D * kLdRows;          // [D][kLdTile]
  float* Gt = Qt + D * kLdTile;          // dO, [D][kLdTile]
  float* Qr = Gt + D * kLdTile;          // [kTile][row_ld]
  float* Gr = Qr + kTile * row_ld<D>();  // dO, [kTile][row_ld]
  float* Pq = Gr + kTile * row_ld<D>();  // Pd, [kTile][kLdRows] (query-major)
  float* Sq = Pq + kTile * kLdRows;      // dS, [kTile][kLdRows]
  float* mt = Sq + kTile * kLdRows;      // the tile's row statistics and D_i
  float* invt = mt + kTile;
  float* dt = invt + kTile;
  const AttentionDims& d = a.d;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t blocks_per_head = (d.Tk + kRows - 1) / kRows;
  const int64_t offset = d.Tk - d.Tq;
  TileInRegisters<D, kTile> next_q, next_g;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H, j0 = (blk % blocks_per_head) * kRows;
    // Queries before j0 - offset see none of these keys (causal): their tiles are skipped.
    const int64_t i_begin = a.skip_causal ? max64(0, j0 - offset) / kTile * kTile : 0;
    __syncthreads();
    load_k_major<D>(Kt, kLdRows, kRows, k, ks, b, h, j0, d.Tk - j0, d.dk);
    load_k_major<D>(Vt, kLdRows, kRows, v, vs, b, h, j0, d.Tk - j0, d.dk);
    if (i_begin < d.Tq) {
      next_q.load(q, qs, b, h, i_begin, min64(kTile, d.Tq - i_begin), d.dk);
      next_g.load(dout, dos, b, h, i_begin, min64(kTile, d.Tq - i_begin), d.dk);
    }
    float acc_k[4][N], acc_v[4][N];
    zero(acc_k);
    zero(acc_v);
    for (int64_t i0 = i_begin; i0 < d.Tq; i0 += kTile) {
      const int64_t count = min64(kTile, d.Tq - i0);
      __syncthreads();
      next_q.store_k_major(Qt, kLdTile);
      next_q.store_row_major(Qr);
      next_g.store_k_major(Gt, kLdTile);
      next_g.store_row_major(Gr);
      if (threadIdx.x < count) {
        const int64_t r = bh * d.Tq + i0 + threadIdx.x;
        mt[threadIdx.x] = stats[2 * r];
        invt[threadIdx.x] = stats[2 * r + 1];
        dt[threadIdx.x] = rowdot[r];
      }
      __syncthreads();
      if (i0 + kTile < d.Tq) {
        next_q.load(q, qs, b, h, i0 + kTile, min64(kTile, d.Tq - i0 - kTile), d.dk);
        next_g.load(dout, dos, b, h, i0 + kTile, min64(kTile, d.Tq - i0 - kTile), d.dk);
      }
      // Transposed scores: rows are keys (4 ty + r), columns queries (2 tx + c).
      float s[4][2], dp[4][2];
      zero(s);
      zero(dp);
      tile_product<2, D>(s, Kt, kLdRows, Qt, kLdTile);
      tile_product<2, D>(dp, Vt, kLdRows, Gt, kLdTile);
      const bool masks = tile_has_masks(a, j0, i0, count, false);
      float pd[4][2], ds[4][2];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ii = 2 * tx + c;
          const int64_t i = i0 + ii, j = j0 + 4 * ty + r;
          const bool present = ii < count && j < d.Tk;
          const bool masked = !present || (masks && masked_at(a, b, i, j));
          const float sc = masked ? a.mask.fill : scaled_score(a, s[r][c], h, i, j, true);
          const float p = present ? expf(sc - mt[ii]) * invt[ii] : 0.f;
          float g = dp[r][c];
          pd[r][c] = p;
          if (a.drop.p > 0.f) {
            const bool keep = present && dropout_kept(a, bh, i, j);
            pd[r][c] = keep ? p * a.keep_scale : 0.f;
            g = keep ? g * a.keep_scale : 0.f;
          }
          ds[r][c] = masked ? 0.f : p * (g - (present ? dt[ii] : 0.f)) * a.inv_divisor;
        }
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        *reinterpret_cast<float4*>(Pq + (2 * tx + c) * kLdRows + 4 * ty) =
            make_float4(pd[0][c], pd[1][c], pd[2][c], pd[3][c]);
        *reinterpret_cast<float4*>(Sq + (2 * tx + c) * kLdRows + 4 * ty) =
            make_float4(ds[0][c], ds[1][c], ds[2][c], ds[3][c]);
      }
      __syncthreads();
      tile_product<N, kTile>(acc_v, Pq, kLdRows, Gr, row_ld<D>(), static_cast<int>(count));
      tile_product<N, kTile>(acc_k, Sq, kLdRows, Qr, row_ld<D>(), static_cast<int>(count));
    }
    const float one[4] = {1.f, 1.f, 1.f, 1.f};
    store_rows<N>(dk, dks, b, h, j0, d.Tk, d.dk, acc_k, one, accumulate);
    store_rows<N>(dv, dvs, b, h, j0, d.Tk, d.dk, acc_v, one, accumulate);
  }
}





// Lets `kernel` take `floats` of dynamic shared memory.
template <class Kernel>
size_t shared_bytes(Kernel* kernel, int floats) {
  return allow_shared_bytes(kernel, static_cast<size_t>(floats) * sizeof(float));
}

}  // namespace

int64_t flash_head_width(int64_t dk) { return dk <= 32 ? 32 : dk <= 64 ? 64 : 128; }

bool flash_attention_fits(const AttentionDims& d) { return d.dk >= 1 && d.dk <= 128 && d.Tq >= 1 && d.Tk >= 1; }

void flash_attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                             const float* v, HeadsView vs, float* out, HeadsView os, float* stats,
                             const AttentionMask& mask, const AttentionDropout& drop) {
  QKV_CHECK(flash_attention_fits(d), "flash attention: dk = " << d.dk << ", Tq = " << d.Tq << ", Tk = " << d.Tk
                                                              << " (it takes 1 <= dk <= 128 and non-empty rows)");
  if (d.B * d.H == 0) return;
  const FlashArgs a = flash_args(d, mask, drop);
  const int64_t blocks = d.B * d.H * ((d.Tq + kRows - 1) / kRows);
  // Tiles are loaded as needed: on an H200 that forward took 2.47 ms a GPT-2 small layer against
  // 2.55 ms with the next tile prefetched (docs/gpu.md). QKV_FLASH_PREFETCH=1 (read at each call, so
  // that a bench can time both on one GPU) takes the prefetching form.
  const char* prefetch_env = std::getenv("QKV_FLASH_PREFETCH");
  const bool prefetch = prefetch_env && std::string_view(prefetch_env) == "1";
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    const auto launch = [&](auto kernel) {
      const size_t bytes = shared_bytes(kernel, forward_floats<D>());
      kernel<<<grid_for(blocks), kThreads, bytes, qkv::cuda::current_stream()>>>(a, q, qs, k, ks, v, vs, out, os,
                                                                                stats);
    };
    if (prefetch)
      launch(flash_forward_kernel<D, true>);
    else
      launch(flash_forward_kernel<D, false>);
  });
  QKV_CUDA_CHECK_LAUNCH("flash_attention_forward");
}

void flash_attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                              const float* k, HeadsView ks, const float* v, HeadsView vs, const float* out,
                              HeadsView os, const float* stats, const AttentionMask& mask,
                              const AttentionDropout& drop, float* dq, HeadsView dqs, float* dk, HeadsView dks,
                              float* dv, HeadsView dvs, bool accumulate, float* dbias_rows) {
  QKV_CHECK(flash_attention_fits(d), "flash attention backward: dk = " << d.dk << ", Tq = " << d.Tq << ", Tk = "
                                                                       << d.Tk);
  if (d.B * d.H == 0) return;
  FlashArgs a = flash_args(d, mask, drop);
  a.dbias_rows = dbias_rows;
  cudaStream_t stream = qkv::cuda::current_stream();
  if (dbias_rows)  // the tiles a causal mask skips are never visited: their entries stay 0
    QKV_CUDA_CHECK(cudaMemsetAsync(dbias_rows, 0, static_cast<size_t>(d.B * d.H * d.Tq * d.Tk) * sizeof(float), stream));
  detail::Scratch rowdot(static_cast<size_t>(d.B * d.H * d.Tq) * sizeof(float), stream);
  flash::launch_rowdot(d, dout, dos, out, os, rowdot.as<float>(), stream);
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    const size_t dq_bytes = shared_bytes(flash_backward_dq_kernel<D>, dq_floats<D>());
    flash_backward_dq_kernel<D><<<grid_for(d.B * d.H * ((d.Tq + kRows - 1) / kRows)), kThreads, dq_bytes, stream>>>(
        a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dq, dqs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward (dQ)");
    const size_t dkv_bytes = shared_bytes(flash_backward_dkv_kernel<D>, dkv_floats<D>());
    flash_backward_dkv_kernel<D><<<grid_for(d.B * d.H * ((d.Tk + kRows - 1) / kRows)), kThreads, dkv_bytes, stream>>>(
        a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dk, dks, dv, dvs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward (dK, dV)");
  });
  rowdot.release();
}

namespace flash {
void launch_rowdot(const AttentionDims& d, const float* dout, HeadsView dos, const float* out, HeadsView os,
                   float* rowdot, cudaStream_t stream) {
  rowdot_kernel<<<grid_for((d.B * d.H * d.Tq + 7) / 8), 256, 0, stream>>>(d, dout, dos, out, os, rowdot);
  QKV_CUDA_CHECK_LAUNCH("flash attention backward (dO . O)");
}
}  // namespace flash

}  // namespace qkv::kernels::cuda
