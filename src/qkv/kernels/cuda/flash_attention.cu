// Attention on the GPU without the (B, H, Tq, Tk) softmax: FlashAttention's online softmax (Dao et
// al. 2022), in float32 so that it agrees with the CPU's attention to float32 rounding.
//
// Forward, per query row i: running max m, running sum l, running output o over key tiles,
//   s_j = q_i . k_j / sqrt(dk)  (the fill where masked),  m' = max(m, s_j),
//   l = l e^(m - m') + e^(s_j - m'),  o = o e^(m - m') + dropout(e^(s_j - m')) v_j,
// and at the end O_i = o / l. The row keeps (m, 1 / l): P_ij = e^(s_ij - m) (1 / l) again, as the
// CPU's softmax_row computes it (exp(x - max) times 1 / sum). Keeping m and 1 / l rather than one
// log-sum-exp matters for fully masked rows: with the fill -1e9, m + log(l) rounds back to -1e9.
//
// Backward, with Pd = dropout(P), dP = dropout_mask(dO V^T) and D_i = sum_j dP_ij P_ij:
//   D_i = dO_i . O_i          (O = Pd V, so dO_i . O_i = sum_j P_ij dropout_mask(dO_i . v_j))
//   dS_ij = P_ij (dP_ij - D_i) / sqrt(dk), 0 where masked (kernels/attention.h)
//   dQ_i = sum_j dS_ij k_j;   dK_j = sum_i dS_ij q_i;   dV_j = sum_i Pd_ij dO_i
// in two kernels, neither with atomics (so the bits do not depend on scheduling): one per tile of
// query rows for dQ, one per tile of key rows for dK and dV; each recomputes P from q, k and (m, 1/l).
//
// Layout: a row of dk <= D floats (D = 32, 64 or 128) is shared by D / 32 neighbouring threads, each
// holding 32 of its columns in registers (float4 chunks part, part + D/32, ...: the threads of one
// row read different banks of a shared tile); dot products meet by shuffles. A block of 128 threads
// takes 128 / (D / 32) rows; tiles of 32 keys (or queries) pass through shared memory.
//
// Causal masks without padding masks: tiles wholly above the diagonal are skipped. Their P is exactly
// 0 there (e^(fill - m) underflows, each row having key 0 unmasked), so the result is the same.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/flash_attention.h"
#include "qkv/kernels/random.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 32;     // keys (forward, dQ) or queries (dK, dV) per shared tile
constexpr int kPerThread = 32;  // columns of a row in one thread's registers
constexpr int kChunks = kPerThread / 4;

struct FlashArgs {
  AttentionDims d;
  AttentionMask mask;
  AttentionDropout drop;
  float divisor;       // the CPU's float sqrt(dk)
  float inv_divisor;   // 1 / divisor, as the CPU's backward
  float keep_scale;    // 1 / (1 - p)
  bool skip_causal;    // causal, no padding masks, Tk >= Tq
};

__host__ __device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__host__ __device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

__device__ __forceinline__ bool masked_at(const FlashArgs& a, int64_t b, int64_t i, int64_t j, bool row_dropped) {
  const AttentionMask& m = a.mask;
  return row_dropped || (m.causal && j > i + (a.d.Tk - a.d.Tq)) || (m.key_keep && m.key_keep[b * a.d.Tk + j] == 0);
}

__device__ __forceinline__ bool row_dropped(const FlashArgs& a, int64_t b, int64_t i) {
  return a.mask.query_keep && a.mask.query_keep[b * a.d.Tq + i] == 0;
}

// The first column of chunk n of the thread `part` of a row.
template <int D>
__device__ __forceinline__ int column(int n, int part) {
  return 4 * (n * (D / kPerThread) + part);
}

// r = the thread's columns of a row at src (zeros past dk, or everywhere when !valid).
template <int D>
__device__ __forceinline__ void load_row(float (&r)[kPerThread], const float* src, int64_t dk, int part, bool valid) {
#pragma unroll
  for (int n = 0; n < kChunks; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = column<D>(n, part) + e;
      r[4 * n + e] = valid && c < dk ? src[c] : 0.f;
    }
}

template <int D>
__device__ __forceinline__ void store_row(float* dst, const float (&r)[kPerThread], int64_t dk, int part, float scale,
                                          bool accumulate) {
#pragma unroll
  for (int n = 0; n < kChunks; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = column<D>(n, part) + e;
      if (c < dk) dst[c] = accumulate ? dst[c] + r[4 * n + e] * scale : r[4 * n + e] * scale;
    }
}

// The row's dot product with a row of a shared tile, summed over the row's D / 32 threads (every
// one of them gets the same bits: a + b == b + a).
template <int D>
__device__ __forceinline__ float dot(const float (&r)[kPerThread], const float* tile_row, int part) {
  float s = 0.f;
#pragma unroll
  for (int n = 0; n < kChunks; ++n) {
    const float4 t = *reinterpret_cast<const float4*>(tile_row + column<D>(n, part));
    s = fmaf(r[4 * n], t.x, s);
    s = fmaf(r[4 * n + 1], t.y, s);
    s = fmaf(r[4 * n + 2], t.z, s);
    s = fmaf(r[4 * n + 3], t.w, s);
  }
#pragma unroll
  for (int o = D / kPerThread / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// acc += w * (the thread's columns of a shared tile row).
template <int D>
__device__ __forceinline__ void axpy(float (&acc)[kPerThread], float w, const float* tile_row, int part) {
#pragma unroll
  for (int n = 0; n < kChunks; ++n) {
    const float4 t = *reinterpret_cast<const float4*>(tile_row + column<D>(n, part));
    acc[4 * n] = fmaf(w, t.x, acc[4 * n]);
    acc[4 * n + 1] = fmaf(w, t.y, acc[4 * n + 1]);
    acc[4 * n + 2] = fmaf(w, t.z, acc[4 * n + 2]);
    acc[4 * n + 3] = fmaf(w, t.w, acc[4 * n + 3]);
  }
}

// tile[r][c] = rows first + r of the (b, h) head of x, for r < kTile (zeros past `count` or dk). All
// threads of the block call it.
template <int D>
__device__ void load_tile(float* tile, const float* x, HeadsView xs, int64_t b, int64_t h, int64_t first,
                          int64_t count, int64_t dk) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D;
    tile[idx] = r < count && c < dk ? x[b * xs.b + h * xs.h + (first + r) * xs.t + c] : 0.f;
  }
}

// The keys a tile of query rows [i0, i_last] needs: every key, or up to the diagonal.
__device__ __forceinline__ int64_t keys_end(const FlashArgs& a, int64_t i_last) {
  return a.skip_causal ? min64(a.d.Tk, i_last + (a.d.Tk - a.d.Tq) + 1) : a.d.Tk;
}

__device__ __forceinline__ uint64_t drop_counter(const FlashArgs& a, int64_t bh, int64_t i, int64_t j) {
  return a.drop.offset + static_cast<uint64_t>((bh * a.d.Tq + i) * a.d.Tk + j);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(FlashArgs a, const float* q, HeadsView qs, const float* k, HeadsView ks, const float* v,
                         HeadsView vs, float* out, HeadsView os, float* stats) {
  constexpr int kRows = kThreads / (D / kPerThread);
  __shared__ __align__(16) float kt[kTile * D];
  __shared__ __align__(16) float vt[kTile * D];
  const AttentionDims& d = a.d;
  const int part = threadIdx.x % (D / kPerThread);
  const int64_t tiles = (d.Tq + kRows - 1) / kRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * tiles; blk += gridDim.x) {
    const int64_t bh = blk / tiles, b = bh / d.H, h = bh % d.H, i0 = (blk % tiles) * kRows;
    const int64_t i = i0 + threadIdx.x / (D / kPerThread);
    const bool valid = i < d.Tq;
    float qr[kPerThread], o[kPerThread];
    load_row<D>(qr, q + b * qs.b + h * qs.h + i * qs.t, d.dk, part, valid);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) o[c] = 0.f;
    float m = -INFINITY, l = 0.f;
    const bool dropped = valid && row_dropped(a, b, i);
    const int64_t j_end = keys_end(a, min64(i0 + kRows, d.Tq) - 1);
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      const int64_t count = min64(kTile, j_end - j0);
      __syncthreads();  // the previous tile's readers are done
      load_tile<D>(kt, k, ks, b, h, j0, count, d.dk);
      load_tile<D>(vt, v, vs, b, h, j0, count, d.dk);
      __syncthreads();
      for (int jj = 0; jj < count; ++jj) {
        const int64_t j = j0 + jj;
        const float qk = dot<D>(qr, kt + jj * D, part);
        const float s = valid && masked_at(a, b, i, j, dropped) ? a.mask.fill : qk / a.divisor;
        if (s > m) {  // a new maximum: what was summed is rescaled to it
          const float rescale = expf(m - s);
          l *= rescale;
#pragma unroll
          for (int c = 0; c < kPerThread; ++c) o[c] *= rescale;
          m = s;
        }
        float p = expf(s - m);
        l += p;
        if (a.drop.p > 0.f)
          p = valid && dropout_keep(a.drop.seed, drop_counter(a, bh, i, j), a.drop.p) ? p * a.keep_scale : 0.f;
        axpy<D>(o, p, vt + jj * D, part);
      }
    }
    if (!valid) continue;
    const float inv = 1.f / l;
    store_row<D>(out + b * os.b + h * os.h + i * os.t, o, d.dk, part, inv, false);
    if (stats && part == 0) {
      stats[2 * (bh * d.Tq + i)] = m;
      stats[2 * (bh * d.Tq + i) + 1] = inv;
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

// dQ, per tile of query rows; keys pass through shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                             const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                             const float* rowdot, float* dq, HeadsView dqs, bool accumulate) {
  constexpr int kRows = kThreads / (D / kPerThread);
  __shared__ __align__(16) float kt[kTile * D];
  __shared__ __align__(16) float vt[kTile * D];
  const AttentionDims& d = a.d;
  const int part = threadIdx.x % (D / kPerThread);
  const int64_t tiles = (d.Tq + kRows - 1) / kRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * tiles; blk += gridDim.x) {
    const int64_t bh = blk / tiles, b = bh / d.H, h = bh % d.H, i0 = (blk % tiles) * kRows;
    const int64_t i = i0 + threadIdx.x / (D / kPerThread);
    const bool valid = i < d.Tq;
    float qr[kPerThread], gr[kPerThread], acc[kPerThread];
    load_row<D>(qr, q + b * qs.b + h * qs.h + i * qs.t, d.dk, part, valid);
    load_row<D>(gr, dout + b * dos.b + h * dos.h + i * dos.t, d.dk, part, valid);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) acc[c] = 0.f;
    const int64_t r = bh * d.Tq + i;
    const float m = valid ? stats[2 * r] : 0.f, inv = valid ? stats[2 * r + 1] : 0.f;
    const float Di = valid ? rowdot[r] : 0.f;
    const bool dropped = valid && row_dropped(a, b, i);
    const int64_t j_end = keys_end(a, min64(i0 + kRows, d.Tq) - 1);
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
      const int64_t count = min64(kTile, j_end - j0);
      __syncthreads();
      load_tile<D>(kt, k, ks, b, h, j0, count, d.dk);
      load_tile<D>(vt, v, vs, b, h, j0, count, d.dk);
      __syncthreads();
      for (int jj = 0; jj < count; ++jj) {
        const int64_t j = j0 + jj;
        const float qk = dot<D>(qr, kt + jj * D, part);
        float dp = dot<D>(gr, vt + jj * D, part);
        const bool masked = !valid || masked_at(a, b, i, j, dropped);
        const float p = expf(qk / a.divisor - m) * inv;
        if (a.drop.p > 0.f)
          dp = valid && dropout_keep(a.drop.seed, drop_counter(a, bh, i, j), a.drop.p) ? dp * a.keep_scale : 0.f;
        const float ds = masked ? 0.f : p * (dp - Di) * a.inv_divisor;
        axpy<D>(acc, ds, kt + jj * D, part);
      }
    }
    if (valid) store_row<D>(dq + b * dqs.b + h * dqs.h + i * dqs.t, acc, d.dk, part, 1.f, accumulate);
  }
}

// dK and dV, per tile of key rows; queries, their gradients and statistics pass through shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkv_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                              const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                              const float* rowdot, float* dk, HeadsView dks, float* dv, HeadsView dvs,
                              bool accumulate) {
  constexpr int kRows = kThreads / (D / kPerThread);
  __shared__ __align__(16) float qt[kTile * D];
  __shared__ __align__(16) float gt[kTile * D];
  __shared__ float mt[kTile], invt[kTile], dt[kTile];
  __shared__ int droppedt[kTile];
  const AttentionDims& d = a.d;
  const int part = threadIdx.x % (D / kPerThread);
  const int64_t tiles = (d.Tk + kRows - 1) / kRows;
  const int64_t offset = d.Tk - d.Tq;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * tiles; blk += gridDim.x) {
    const int64_t bh = blk / tiles, b = bh / d.H, h = bh % d.H, j0 = (blk % tiles) * kRows;
    const int64_t j = j0 + threadIdx.x / (D / kPerThread);
    const bool valid = j < d.Tk;
    float kr[kPerThread], vr[kPerThread], dkr[kPerThread], dvr[kPerThread];
    load_row<D>(kr, k + b * ks.b + h * ks.h + j * ks.t, d.dk, part, valid);
    load_row<D>(vr, v + b * vs.b + h * vs.h + j * vs.t, d.dk, part, valid);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) dkr[c] = dvr[c] = 0.f;
    // Queries before i = j0 - offset see none of these keys (causal): their tiles are skipped.
    const int64_t i_begin = a.skip_causal ? max64(0, j0 - offset) / kTile * kTile : 0;
    for (int64_t i0 = i_begin; i0 < d.Tq; i0 += kTile) {
      const int64_t count = min64(kTile, d.Tq - i0);
      __syncthreads();
      load_tile<D>(qt, q, qs, b, h, i0, count, d.dk);
      load_tile<D>(gt, dout, dos, b, h, i0, count, d.dk);
      if (threadIdx.x < count) {
        const int64_t r = bh * d.Tq + i0 + threadIdx.x;
        mt[threadIdx.x] = stats[2 * r];
        invt[threadIdx.x] = stats[2 * r + 1];
        dt[threadIdx.x] = rowdot[r];
        droppedt[threadIdx.x] = row_dropped(a, b, i0 + threadIdx.x) ? 1 : 0;
      }
      __syncthreads();
      for (int ii = 0; ii < count; ++ii) {
        const int64_t i = i0 + ii;
        const bool masked = !valid || masked_at(a, b, i, j, droppedt[ii] != 0);
        const float qk = dot<D>(kr, qt + ii * D, part);  // by every thread: it shuffles
        const float s = masked ? a.mask.fill : qk / a.divisor;
        const float p = expf(s - mt[ii]) * invt[ii];
        float dp = dot<D>(vr, gt + ii * D, part);
        float pd = p;
        if (a.drop.p > 0.f) {
          const bool keep = valid && dropout_keep(a.drop.seed, drop_counter(a, bh, i, j), a.drop.p);
          pd = keep ? p * a.keep_scale : 0.f;
          dp = keep ? dp * a.keep_scale : 0.f;
        }
        axpy<D>(dvr, pd, gt + ii * D, part);
        const float ds = masked ? 0.f : p * (dp - dt[ii]) * a.inv_divisor;
        axpy<D>(dkr, ds, qt + ii * D, part);
      }
    }
    if (!valid) continue;
    store_row<D>(dk + b * dks.b + h * dks.h + j * dks.t, dkr, d.dk, part, 1.f, accumulate);
    store_row<D>(dv + b * dvs.b + h * dvs.h + j * dvs.t, dvr, d.dk, part, 1.f, accumulate);
  }
}

FlashArgs flash_args(const AttentionDims& d, const AttentionMask& mask, const AttentionDropout& drop) {
  FlashArgs a{};
  a.d = d;
  a.mask = mask;
  a.drop = drop;
  a.divisor = static_cast<float>(std::sqrt(static_cast<double>(d.dk)));
  a.inv_divisor = 1.f / a.divisor;
  a.keep_scale = drop.p > 0.f ? 1.f / (1.f - drop.p) : 1.f;
  a.skip_causal = mask.causal && !mask.key_keep && !mask.query_keep && d.Tk >= d.Tq;
  return a;
}

unsigned grid_for(int64_t blocks) { return static_cast<unsigned>(min64(blocks, int64_t{1} << 30)); }

int64_t rows_per_block(int64_t dk) { return kThreads / (flash_head_width(dk) / kPerThread); }

// Calls f(std::integral_constant<int, D>) for the head width that holds dk.
template <class F>
void with_width(int64_t dk, F&& f) {
  switch (flash_head_width(dk)) {
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    default: f(std::integral_constant<int, 128>{}); break;
  }
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
  const int64_t blocks = d.B * d.H * ((d.Tq + rows_per_block(d.dk) - 1) / rows_per_block(d.dk));
  with_width(d.dk, [&](auto width) {
    flash_forward_kernel<decltype(width)::value><<<grid_for(blocks), kThreads, 0, qkv::cuda::current_stream()>>>(
        a, q, qs, k, ks, v, vs, out, os, stats);
  });
  QKV_CUDA_CHECK_LAUNCH("flash_attention_forward");
}

void flash_attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                              const float* k, HeadsView ks, const float* v, HeadsView vs, const float* out,
                              HeadsView os, const float* stats, const AttentionMask& mask,
                              const AttentionDropout& drop, float* dq, HeadsView dqs, float* dk, HeadsView dks,
                              float* dv, HeadsView dvs, bool accumulate) {
  QKV_CHECK(flash_attention_fits(d), "flash attention backward: dk = " << d.dk << ", Tq = " << d.Tq << ", Tk = "
                                                                       << d.Tk);
  if (d.B * d.H == 0) return;
  const FlashArgs a = flash_args(d, mask, drop);
  cudaStream_t stream = qkv::cuda::current_stream();
  detail::Scratch rowdot(static_cast<size_t>(d.B * d.H * d.Tq) * sizeof(float), stream);
  rowdot_kernel<<<grid_for((d.B * d.H * d.Tq + 7) / 8), 256, 0, stream>>>(d, dout, dos, out, os, rowdot.as<float>());
  QKV_CUDA_CHECK_LAUNCH("flash_attention_backward (dO . O)");
  const int64_t rows = rows_per_block(d.dk);
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    flash_backward_dq_kernel<D><<<grid_for(d.B * d.H * ((d.Tq + rows - 1) / rows)), kThreads, 0, stream>>>(
        a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dq, dqs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward (dQ)");
    flash_backward_dkv_kernel<D><<<grid_for(d.B * d.H * ((d.Tk + rows - 1) / rows)), kThreads, 0, stream>>>(
        a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dk, dks, dv, dvs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward (dK, dV)");
  });
  rowdot.release();
}

}  // namespace qkv::kernels::cuda
