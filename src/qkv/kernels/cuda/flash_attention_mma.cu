// The bf16 flash attention kernels in FlashArgs' semantics (flash_attention_bf16.cu) at the register
// level, as FlashAttention-2 writes them: mma.sync m16n8k16 (bf16 x bf16 -> f32) through inline PTX,
// whose float accumulators of S = Q K^T become, in registers, the bf16 A operand of P V (and dS the A
// operand of dS K, dS^T Q in the backward); no score tile passes through shared memory. The default
// since an H200 run validated it (every case of tests/cuda, memcheck clean; 2x the WMMA forward, 2.6x
// its backward); QKV_FLASH_MMA=0 (flash_common.cuh's flash_mma_form) keeps the WMMA kernels.
//
// Same roundings as the WMMA kernels: Q, K, V, dO rounded to bf16 once, by a pre-pass
// (round_heads_kernel: each head's rows D wide, zeros past dk, a multiple of 64 rows, zeros past T;
// the same nearest-even rounding the WMMA kernels apply as they load), P after dropout rounded before
// P V, dS rounded before dS K and dS^T Q; scores, the online softmax, its statistics (m, 1 / l, the
// same (B, H, Tq, 2) buffer, so either form's backward reads either form's forward) and every sum
// float32. e^x goes through ex2.approx of (s - m) log2 e (a few float32 ulps from expf). Masks,
// dropout counters, T5's bias and its gradient rows: flash_common.cuh's.
//
// Layout: a block of 4 warps owns 64 rows (queries; keys in the dK/dV kernel), a warp 16 of them
// (one m16 fragment); the other side passes by in tiles of 64, copied by cp.async from the rounded
// rows into shared memory as row-major bf16 (D + 8 to a row, against bank conflicts), two buffers,
// the next tile's copies running under the current tile's products, one barrier a tile. Tiles
// without masks, bias or dropout take a path with no test per score. Fragments (lane = 4 g + t):
// A (16 x 16) a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..);
// B (16 x 8) b0 = (k 2t..2t+1, n g), b1 = (k 2t + 8.., n g); C c0, c1 = (g, 2t..2t+1), c2, c3 =
// (g + 8, 2t..). A row-major tile X[n][k] gives B = X^T directly (two bf16 of a row, one 32-bit
// load); B = X (k along rows) comes from ldmatrix .trans. Two adjacent n8 accumulator tiles are one
// k16 A fragment of the next product.
//
// ptxas (sm_90, CUDA 13), registers / dynamic shared memory a block at D = 32, 64, 128: forward
// 164 / 25.6 KB, 168 / 46.1 KB, 253 / 87.0 KB; dQ 153 / 30.7 KB, 168 / 55.3 KB (8 bytes spilled),
// 226 / 104.4 KB; dK dV 166 / 32.3 KB, 168 / 56.8 KB, 251 / 106.0 KB; no other spills. Widths <= 64
// are held to 168 registers (__launch_bounds__: 3 blocks an SM). H200, a GPT-2 small layer (B16
// T1024 H12 dk64 causal, bench_gpu_ops, the pre-pass included): forward 0.568 ms (WMMA 1.114),
// backward 1.019 ms (WMMA 2.630); PyTorch's SDPA bf16 0.14 / 0.62 ms.
#include <cuda_bf16.h>

#include <cstdlib>
#include <cstring>

#include "qkv/kernels/cuda/flash_common.cuh"

namespace qkv::kernels::cuda::flash {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kCols = 64;  // the other side's tile
static_assert(kFlashRows == 16 * kWarps, "a warp owns one m16 fragment of rows");

template <int D>
constexpr int ld() {  // bf16 to a row of a shared tile
  return D + 8;
}
template <int D>
constexpr size_t tile_bytes() {
  return size_t{64} * ld<D>() * sizeof(bf16);
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {  // lo in the low half (the lower column)
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

__device__ __forceinline__ uint32_t lds32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Four 8 x 8 matrices transposed: lane l names row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The A fragment of rows [row0, row0 + 16), columns [k0, k0 + 16) of a row-major shared tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* X, int row0, int k0) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const bf16* p = X + (row0 + g) * ld<D>() + k0 + 2 * t;
  a[0] = lds32(p);
  a[1] = lds32(p + 8 * ld<D>());
  a[2] = lds32(p + 8);
  a[3] = lds32(p + 8 * ld<D>() + 8);
}

// acc[n] += A X^T for the n8 tiles n < N of rows [col0 + 8 n, col0 + 8 n + 8) of X (row-major, the
// product's columns), k columns [k0, k0 + 16).
template <int D, int N>
__device__ __forceinline__ void mma_rows(float (&acc)[N][4], const uint32_t (&a)[4], const bf16* X, int col0, int k0) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const bf16* p = X + (col0 + 8 * n + g) * ld<D>() + k0 + 2 * t;
    mma16816(acc[n], a, lds32(p), lds32(p + 8));
  }
}

// acc[n] += A X[k0 .. k0 + 16)[8 n .. 8 n + 8) for every n8 tile of D columns of X (row-major, k along
// its rows): X's 16 x 16 blocks through ldmatrix .trans.
template <int D>
__device__ __forceinline__ void mma_cols(float (&acc)[D / 8][4], const uint32_t (&a)[4], const bf16* X, int k0) {
  const int lane = threadIdx.x % 32;
  const bf16* p = X + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ld<D>() + (lane >> 4) * 8;
#pragma unroll
  for (int np = 0; np < D / 16; ++np) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, p + 16 * np);
    mma16816(acc[2 * np], a, b[0], b[1]);
    mma16816(acc[2 * np + 1], a, b[2], b[3]);
  }
}

// The A fragment (16 rows x 16 columns) made of two adjacent n8 accumulator tiles.
__device__ __forceinline__ void to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// flash_attention_bf16.cu's score_bf16: q.k times 1 / divisor, plus T5's bias where given.
__device__ __forceinline__ float score_of(const FlashArgs& a, float qk, int64_t h, int64_t i, int64_t j, bool inside) {
  const float s = qk * a.inv_divisor;
  return a.mask.bias && inside ? s + a.mask.bias[(i * a.d.Tk + j) * a.d.H + h] : s;
}

// e^(s - m) as 2^((s - m) log2 e) through the SFU's ex2: within a few float32 ulps of expf, far
// inside bf16's rounding of P; -inf gives 0 (and -inf - -inf NaN, as expf). The difference comes
// first, as in expf(s - m): with masked scores at -1e9, s log2 e - m log2 e would cancel to garbage.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_of(float s, float m) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((s - m) * kLog2e));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Writes (or adds to, when accumulate) a warp's accumulated 16 x D rows row0 + g, row0 + g + 8 to x;
// rows past rows_end and columns past dk are left alone.
template <int D>
__device__ void store_rows(float* x, HeadsView xs, int64_t b, int64_t h, int64_t row0, int64_t rows_end, int64_t dk,
                           const float (&acc)[D / 8][4], float scale0, float scale1, bool accumulate) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + g + 8 * half;
    if (row >= rows_end) continue;
    const float scale = half ? scale1 : scale0;
    float* dst = x + b * xs.b + h * xs.h + row * xs.t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * n + 2 * t + e;
        if (c >= dk) continue;
        const float value = acc[n][2 * half + e] * scale;
        dst[c] = accumulate ? dst[c] + value : value;
      }
  }
}

// The forward reads its operands rounded beforehand: round_heads_kernel writes each head's rows
// as bf16, D to a row (zeros past dk) and a multiple of 64 rows (zeros past T), so that the tiles
// come by cp.async straight into shared memory, the next under the current one's products.
constexpr int64_t padded_rows(int64_t T) { return (T + 63) / 64 * 64; }

template <int D>
__global__ void round_heads_kernel(const float* x, HeadsView xs, int64_t H, int64_t T, int64_t dk, bool vec4,
                                   bf16* out, int64_t quads) {
  const int64_t T_pad = padded_rows(T);
  for (int64_t q4 = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q4 < quads;
       q4 += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = 4 * q4, row = e / D, r = row % T_pad, bh = row / T_pad;
    const int c = static_cast<int>(e % D);
    float f[4] = {0.f, 0.f, 0.f, 0.f};
    if (r < T && c < dk) {
      const float* src = x + (bh / H) * xs.b + (bh % H) * xs.h + r * xs.t + c;
      if (vec4) {  // dk a multiple of 4: the 4 columns are all there
        const float4 v = *reinterpret_cast<const float4*>(src);
        f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
      } else {
        for (int k = 0; k < 4 && c + k < dk; ++k) f[k] = src[k];
      }
    }
    uint2 packed;
    packed.x = pack_bf16(f[0], f[1]);
    packed.y = pack_bf16(f[2], f[3]);
    *reinterpret_cast<uint2*>(out + e) = packed;
  }
}

// Starts copying 64 rounded rows (D bf16 each, contiguous) into a shared tile.
template <int D>
__device__ __forceinline__ void copy_tile(bf16* dst, const bf16* src) {
#pragma unroll
  for (int u = 0; u < 64 * D / 8 / kThreads; ++u) {
    const int idx = threadIdx.x + u * kThreads, r = idx / (D / 8), c = 8 * (idx % (D / 8));
    cp_async16(dst + r * ld<D>() + c, src + r * D + c, 16);
  }
}

// The forward: 64 query rows a block; its Q fragments in registers for the whole row of key tiles.
// Shared memory: the Q tile and two K and V tiles (5 x 64 x (D + 8) bf16), the next tile's copies
// running under the current tile's products. qb, kb, vb: round_heads_kernel's.
template <int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1)
    flash_forward_mma_kernel(FlashArgs a, const bf16* qb, const bf16* kb, const bf16* vb, float* out, HeadsView os,
                             float* stats) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  // K tile of buffer i at 1 + i, V tile at 3 + i (tiles from smem).
  const auto k_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (1 + i) * tile_bytes<D>()); };
  const auto v_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (3 + i) * tile_bytes<D>()); };
  const AttentionDims& d = a.d;
  const int64_t tq_pad = padded_rows(d.Tq), tk_pad = padded_rows(d.Tk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t blocks_per_head = (d.Tq + kFlashRows - 1) / kFlashRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t i0 = (blk % blocks_per_head) * kFlashRows;
    const int64_t rows[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
    const bool row_in[2] = {rows[0] < d.Tq, rows[1] < d.Tq};
    const int64_t j_end = keys_end(a, min64(i0 + kFlashRows, d.Tq) - 1);
    const bf16* k_head = kb + bh * tk_pad * D;
    const bf16* v_head = vb + bh * tk_pad * D;
    __syncthreads();  // the previous block's readers are done
    copy_tile<D>(Qs, qb + (bh * tq_pad + i0) * D);
    copy_tile<D>(k_tile(0), k_head);
    copy_tile<D>(v_tile(0), v_head);
    cp_async_commit();
    uint32_t qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    int buf = 0;
    for (int64_t j0 = 0; j0 < j_end; j0 += kCols, buf ^= 1) {
      const int64_t count = min64(kCols, j_end - j0);
      cp_async_wait_all();
      __syncthreads();  // this tile in place; the previous tile's readers (of the other buffers) are done
      if (j0 + kCols < j_end) {  // the next tile's copies run under this one's products
        copy_tile<D>(k_tile(buf ^ 1), k_head + (j0 + kCols) * D);
        copy_tile<D>(v_tile(buf ^ 1), v_head + (j0 + kCols) * D);
        cp_async_commit();
      }
      if (j0 == 0)
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) load_a<D>(qf[kc], Qs, warp * 16, 16 * kc);
      const bf16* Ks = k_tile(buf);
      const bf16* Vs = v_tile(buf);
      float s[kCols / 8][4];
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) mma_rows<D, kCols / 8>(s, qf[kc], Ks, 0, 16 * kc);
      const bool masks = tile_has_masks(a, i0, j0, count, true);
      // A whole tile without masks or bias (most of them): no test per score.
      const bool plain = !masks && count == kCols && !a.mask.bias;
      float tile_max[2] = {-INFINITY, -INFINITY};
      if (plain) {
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[n][e] *= a.inv_divisor;
            tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = 8 * n + 2 * t + (e & 1);
            const int64_t i = rows[e >> 1];
            const bool inside = row_in[e >> 1] && c < count;
            s[n][e] = masks && inside && masked_at(a, b, i, j0 + c) ? a.mask.fill
                                                                    : score_of(a, s[n][e], h, i, j0 + c, inside);
            if (c < count) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
          }
      }
      float m_new[2], m_sub[2], rescale[2], sum[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m_new[r] = fmaxf(m[r], quad_max(tile_max[r]));
        m_sub[r] = finite_or_zero(m_new[r]);
        rescale[r] = expf(m[r] - m_sub[r]);  // 0 on the first tile (m = -inf)
      }
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * n + 2 * t + (e & 1);
          const float ex = plain || c < count ? exp_of(s[n][e], m_sub[e >> 1]) : 0.f;
          sum[e >> 1] += ex;
          s[n][e] = ex;
        }
      if (a.drop.p > 0.f) {
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = 8 * n + 2 * t + (e & 1);
            if (row_in[e >> 1] && c < count)
              s[n][e] = dropout_kept(a, bh, rows[e >> 1], j0 + c) ? s[n][e] * a.keep_scale : 0.f;
          }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] = l[r] * rescale[r] + quad_sum(sum[r]);
        m[r] = m_new[r];
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= rescale[0];
        o[n][1] *= rescale[0];
        o[n][2] *= rescale[1];
        o[n][3] *= rescale[1];
      }
#pragma unroll
      for (int kc = 0; kc < kCols / 16; ++kc) {
        uint32_t pf[4];
        to_a(pf, s[2 * kc], s[2 * kc + 1]);
        mma_cols<D>(o, pf, Vs, 16 * kc);
      }
    }
    const float inv[2] = {1.f / l[0], 1.f / l[1]};
    store_rows<D>(out, os, b, h, i0 + warp * 16, d.Tq, d.dk, o, inv[0], inv[1], false);
    if (stats && t == 0)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (rows[r] < d.Tq) {
          stats[2 * (bh * d.Tq + rows[r])] = m[r];
          stats[2 * (bh * d.Tq + rows[r]) + 1] = inv[r];
        }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

// The key columns a backward step takes at once (fewer at width 128, for the registers).
template <int D>
constexpr int sub_cols() {
  return D == 128 ? 16 : 32;
}

// dQ for a block of 64 query rows; keys pass by in tiles of 64, taken sub_cols at a time.
// Shared memory: Q, dO tiles, two K and two V tiles (the next tile's copies under the current
// one's products). qb, gb (dO), kb, vb: round_heads_kernel's.
template <int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1)
    flash_backward_dq_mma_kernel(FlashArgs a, const bf16* qb, const bf16* gb, const bf16* kb, const bf16* vb,
                                 const float* stats, const float* rowdot, float* dq, HeadsView dqs, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kSub = sub_cols<D>(), kN = kSub / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Gs = reinterpret_cast<bf16*>(smem + tile_bytes<D>());  // dO
  const auto k_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (2 + i) * tile_bytes<D>()); };
  const auto v_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (4 + i) * tile_bytes<D>()); };
  const AttentionDims& d = a.d;
  const int64_t tq_pad = padded_rows(d.Tq), tk_pad = padded_rows(d.Tk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t blocks_per_head = (d.Tq + kFlashRows - 1) / kFlashRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t i0 = (blk % blocks_per_head) * kFlashRows;
    const int64_t rows[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
    const int64_t j_end = keys_end(a, min64(i0 + kFlashRows, d.Tq) - 1);
    const bool row_in[2] = {rows[0] < d.Tq, rows[1] < d.Tq};
    float m[2], inv[2], Di[2];  // the row's max, 1 / l, D_i
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = row_in[r] ? stats[2 * (bh * d.Tq + rows[r])] : 0.f;
      inv[r] = row_in[r] ? stats[2 * (bh * d.Tq + rows[r]) + 1] : 0.f;
      Di[r] = row_in[r] ? rowdot[bh * d.Tq + rows[r]] : 0.f;
    }
    const bf16* k_head = kb + bh * tk_pad * D;
    const bf16* v_head = vb + bh * tk_pad * D;
    __syncthreads();  // the previous block's readers are done
    copy_tile<D>(Qs, qb + (bh * tq_pad + i0) * D);
    copy_tile<D>(Gs, gb + (bh * tq_pad + i0) * D);
    copy_tile<D>(k_tile(0), k_head);
    copy_tile<D>(v_tile(0), v_head);
    cp_async_commit();
    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    int buf = 0;
    for (int64_t j0 = 0; j0 < j_end; j0 += kCols, buf ^= 1) {
      const int64_t count = min64(kCols, j_end - j0);
      cp_async_wait_all();
      __syncthreads();  // this tile in place; the previous tile's readers (of the other buffers) are done
      if (j0 + kCols < j_end) {  // the next tile's copies run under this one's products
        copy_tile<D>(k_tile(buf ^ 1), k_head + (j0 + kCols) * D);
        copy_tile<D>(v_tile(buf ^ 1), v_head + (j0 + kCols) * D);
        cp_async_commit();
      }
      const bf16* Ks = k_tile(buf);
      const bf16* Vs = v_tile(buf);
      const bool masks = tile_has_masks(a, i0, j0, count, true);
      const bool plain = !masks && count == kCols && !a.mask.bias && !a.dbias_rows && !(a.drop.p > 0.f);
      for (int c0 = 0; c0 < kCols && c0 < count; c0 += kSub) {
        float s[kN][4], dp[kN][4];
#pragma unroll
        for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
          uint32_t fa[4];
          load_a<D>(fa, Qs, warp * 16, 16 * kc);
          mma_rows<D, kN>(s, fa, Ks, c0, 16 * kc);
          load_a<D>(fa, Gs, warp * 16, 16 * kc);
          mma_rows<D, kN>(dp, fa, Vs, c0, 16 * kc);
        }
        if (plain) {  // no masks, bias, dropout or bias gradient, every key of the tile there
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = e >> 1;
              const float p = exp_of(s[n][e] * a.inv_divisor, m[r]) * inv[r];
              s[n][e] = row_in[r] ? p * (dp[n][e] - Di[r]) * a.inv_divisor : 0.f;
            }
        } else {
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int c = c0 + 8 * n + 2 * t + (e & 1), r = e >> 1;
              const int64_t i = rows[r], j = j0 + c;
              const bool inside = row_in[r] && c < count;
              const bool live = inside && !(masks && masked_at(a, b, i, j));
              const float p = exp_of(score_of(a, s[n][e], h, i, j, inside), m[r]) * inv[r];
              float gr = dp[n][e];
              if (a.drop.p > 0.f) gr = live && dropout_kept(a, bh, i, j) ? gr * a.keep_scale : 0.f;
              const float dbias = live ? p * (gr - Di[r]) : 0.f;  // the CPU's order: (P (dP - D)) / divisor
              if (a.dbias_rows && inside) a.dbias_rows[(bh * d.Tq + i) * d.Tk + j] = dbias;
              s[n][e] = dbias * a.inv_divisor;
            }
        }
#pragma unroll
        for (int kc = 0; kc < kSub / 16; ++kc) {
          uint32_t fa[4];
          to_a(fa, s[2 * kc], s[2 * kc + 1]);
          mma_cols<D>(acc, fa, Ks, c0 + 16 * kc);  // dQ += dS K
        }
      }
    }
    store_rows<D>(dq, dqs, b, h, i0 + warp * 16, d.Tq, d.dk, acc, 1.f, 1.f, accumulate);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

// dK and dV for a block of 64 key rows; queries, dO and their statistics pass by in tiles of 64,
// taken sub_cols at a time. A warp's products are transposed: rows its 16 keys, columns queries.
// Shared memory: K, V tiles, two Q and two dO tiles, and two of the query tiles' statistics (m,
// 1 / l pairs, then D_i: 3 x 64 floats): the next query tile's copies run under the current one's
// products. qb, gb (dO), kb, vb: round_heads_kernel's (qb and gb with 64 rows of zeros past their
// last head, for query tiles that start off a multiple of 64).
template <int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1)
    flash_backward_dkv_mma_kernel(FlashArgs a, const bf16* qb, const bf16* gb, const bf16* kb, const bf16* vb,
                                  const float* stats, const float* rowdot, float* dk, HeadsView dks, float* dv,
                                  HeadsView dvs, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kSub = sub_cols<D>(), kN = kSub / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = reinterpret_cast<bf16*>(smem + tile_bytes<D>());
  const auto q_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (2 + i) * tile_bytes<D>()); };
  const auto g_tile = [&](int i) { return reinterpret_cast<bf16*>(smem + (4 + i) * tile_bytes<D>()); };
  const auto st_tile = [&](int i) { return reinterpret_cast<float*>(smem + 6 * tile_bytes<D>()) + i * 3 * kCols; };
  const AttentionDims& d = a.d;
  const int64_t tq_pad = padded_rows(d.Tq), tk_pad = padded_rows(d.Tk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t blocks_per_head = (d.Tk + kFlashRows - 1) / kFlashRows;
  const int64_t offset = d.Tk - d.Tq;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t j0 = (blk % blocks_per_head) * kFlashRows;
    const int64_t keys[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};
    const int64_t i_begin = a.skip_causal ? max64(0, j0 - offset) : 0;
    const bool keys_full = j0 + kFlashRows <= d.Tk;
    __syncthreads();  // the previous block's readers are done
    copy_tile<D>(Ks, kb + (bh * tk_pad + j0) * D);
    copy_tile<D>(Vs, vb + (bh * tk_pad + j0) * D);
    // Starts copying the query tile from `first` into buffer i: Q, dO, their statistics and D_i.
    const auto stage_queries = [&](int64_t first, int i) {
      const int64_t n = min64(kCols, d.Tq - first);
      copy_tile<D>(q_tile(i), qb + (bh * tq_pad + first) * D);
      copy_tile<D>(g_tile(i), gb + (bh * tq_pad + first) * D);
      if (threadIdx.x < kCols) {
        const bool in = threadIdx.x < n;
        const int64_t row = bh * d.Tq + (in ? first + threadIdx.x : 0);
        float* st = st_tile(i);
        cp_async4(st + 2 * threadIdx.x, stats + 2 * row, in ? 4 : 0);
        cp_async4(st + 2 * threadIdx.x + 1, stats + 2 * row + 1, in ? 4 : 0);
        cp_async4(st + 2 * kCols + threadIdx.x, rowdot + row, in ? 4 : 0);
      }
    };
    if (i_begin < d.Tq) stage_queries(i_begin, 0);
    cp_async_commit();
    float acc_k[D / 8][4], acc_v[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_k[n][e] = acc_v[n][e] = 0.f;
    int buf = 0;
    if (i_begin >= d.Tq) cp_async_wait_all();  // K and V alone were copied
    for (int64_t i0 = i_begin; i0 < d.Tq; i0 += kCols, buf ^= 1) {
      const int64_t count = min64(kCols, d.Tq - i0);
      cp_async_wait_all();
      __syncthreads();  // this tile in place; the previous tile's readers (of the other buffers) are done
      if (i0 + kCols < d.Tq) {  // the next tile's copies run under this one's products
        stage_queries(i0 + kCols, buf ^ 1);
        cp_async_commit();
      }
      const bf16* Qs = q_tile(buf);
      const bf16* Gs = g_tile(buf);
      const float* st = st_tile(buf);  // m, 1 / l pairs, then D_i
      const bool masks = tile_has_masks(a, j0, i0, count, false);
      const bool plain = !masks && count == kCols && keys_full && !a.mask.bias && !(a.drop.p > 0.f);
      for (int c0 = 0; c0 < kCols && c0 < count; c0 += kSub) {
        float s[kN][4], dp[kN][4];
#pragma unroll
        for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
          uint32_t fa[4];
          load_a<D>(fa, Ks, warp * 16, 16 * kc);
          mma_rows<D, kN>(s, fa, Qs, c0, 16 * kc);  // S^T = K Q^T
          load_a<D>(fa, Vs, warp * 16, 16 * kc);
          mma_rows<D, kN>(dp, fa, Gs, c0, 16 * kc);  // dP^T = V dO^T
        }
        float pd[kN][4];
        if (plain) {  // no masks, bias or dropout, every query and key of the tile there
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int c = c0 + 8 * n + 2 * t + (e & 1);
              const float p = exp_of(s[n][e] * a.inv_divisor, st[2 * c]) * st[2 * c + 1];
              pd[n][e] = p;
              s[n][e] = p * (dp[n][e] - st[2 * kCols + c]) * a.inv_divisor;  // dS^T
            }
        } else {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = c0 + 8 * n + 2 * t + (e & 1);
            const int64_t i = i0 + c, j = keys[e >> 1];
            const bool present = c < count && j < d.Tk;
            const bool masked = !present || (masks && masked_at(a, b, i, j));
            const float sc = masked ? a.mask.fill : score_of(a, s[n][e], h, i, j, true);
            const float p = present ? exp_of(sc, st[2 * c]) * st[2 * c + 1] : 0.f;
            float gr = dp[n][e], pk = p;
            if (a.drop.p > 0.f) {
              const bool keep = present && dropout_kept(a, bh, i, j);
              pk = keep ? p * a.keep_scale : 0.f;
              gr = keep ? gr * a.keep_scale : 0.f;
            }
            pd[n][e] = pk;
            s[n][e] = masked ? 0.f : p * (gr - st[2 * kCols + c]) * a.inv_divisor;  // dS^T
          }
        }
#pragma unroll
        for (int kc = 0; kc < kSub / 16; ++kc) {
          uint32_t fa[4];
          to_a(fa, pd[2 * kc], pd[2 * kc + 1]);
          mma_cols<D>(acc_v, fa, Gs, c0 + 16 * kc);  // dV += Pd^T dO
          to_a(fa, s[2 * kc], s[2 * kc + 1]);
          mma_cols<D>(acc_k, fa, Qs, c0 + 16 * kc);  // dK += dS^T Q
        }
      }
    }
    store_rows<D>(dk, dks, b, h, j0 + warp * 16, d.Tk, d.dk, acc_k, 1.f, 1.f, accumulate);
    store_rows<D>(dv, dvs, b, h, j0 + warp * 16, d.Tk, d.dk, acc_v, 1.f, 1.f, accumulate);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

}  // namespace

MmaForm flash_mma_form() {
  const char* value = std::getenv("QKV_FLASH_MMA");
  if (!value || !*value) return MmaForm::Both;
  if (std::strcmp(value, "0") == 0) return MmaForm::Off;
  return std::strcmp(value, "fwd") == 0 ? MmaForm::Forward : MmaForm::Both;
}

void flash_forward_mma(const FlashArgs& a, const float* q, HeadsView qs, const float* k, HeadsView ks, const float* v,
                       HeadsView vs, float* out, HeadsView os, float* stats, TileLoads vec4, cudaStream_t stream) {
  const AttentionDims& d = a.d;
  const int64_t blocks = d.B * d.H * ((d.Tq + kFlashRows - 1) / kFlashRows);
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    const int64_t q_quads = d.B * d.H * padded_rows(d.Tq) * D / 4, k_quads = d.B * d.H * padded_rows(d.Tk) * D / 4;
    detail::Scratch rounded(static_cast<size_t>(4 * (q_quads + 2 * k_quads)) * sizeof(bf16), stream);
    bf16* qb = rounded.as<bf16>();
    bf16* kb = qb + 4 * q_quads;
    bf16* vb = kb + 4 * k_quads;
    const auto round = [&](const float* x, HeadsView xs, int64_t T, bool vec4x, bf16* dst, int64_t quads) {
      round_heads_kernel<D><<<grid_for((quads + 255) / 256), 256, 0, stream>>>(x, xs, d.H, T, d.dk, vec4x, dst, quads);
    };
    round(q, qs, d.Tq, vec4.q, qb, q_quads);
    round(k, ks, d.Tk, vec4.k, kb, k_quads);
    round(v, vs, d.Tk, vec4.v, vb, k_quads);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_forward_bf16 (mma.sync: rounding)");
    const size_t bytes = allow_shared_bytes(flash_forward_mma_kernel<D>, 5 * tile_bytes<D>());
    flash_forward_mma_kernel<D><<<grid_for(blocks), kThreads, bytes, stream>>>(a, qb, kb, vb, out, os, stats);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_forward_bf16 (mma.sync)");
    rounded.release();
  });
}

void flash_backward_mma(const FlashArgs& a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                        const float* rowdot, float* dq, HeadsView dqs, float* dk, HeadsView dks, float* dv,
                        HeadsView dvs, bool accumulate, TileLoads vec4, cudaStream_t stream) {
  const AttentionDims& d = a.d;
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    // Q and dO with 64 rows of zeros past their last head (the dK dV kernel's query tiles may start
    // off a multiple of 64), K and V.
    const int64_t q_elems = d.B * d.H * padded_rows(d.Tq) * D + 64 * D, k_elems = d.B * d.H * padded_rows(d.Tk) * D;
    detail::Scratch rounded(static_cast<size_t>(2 * q_elems + 2 * k_elems) * sizeof(bf16), stream);
    bf16* qb = rounded.as<bf16>();
    bf16* gb = qb + q_elems;
    bf16* kb = gb + q_elems;
    bf16* vb = kb + k_elems;
    const auto round = [&](const float* x, HeadsView xs, int64_t T, bool vec4x, bf16* dst, int64_t elems) {
      const int64_t quads = d.B * d.H * padded_rows(T) * D / 4;
      round_heads_kernel<D><<<grid_for((quads + 255) / 256), 256, 0, stream>>>(x, xs, d.H, T, d.dk, vec4x, dst, quads);
      if (elems > 4 * quads)
        QKV_CUDA_CHECK(cudaMemsetAsync(dst + 4 * quads, 0, static_cast<size_t>(elems - 4 * quads) * sizeof(bf16), stream));
    };
    round(q, qs, d.Tq, vec4.q, qb, q_elems);
    round(dout, dos, d.Tq, vec4.dout, gb, q_elems);
    round(k, ks, d.Tk, vec4.k, kb, k_elems);
    round(v, vs, d.Tk, vec4.v, vb, k_elems);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (mma.sync: rounding)");
    const size_t dq_bytes = allow_shared_bytes(flash_backward_dq_mma_kernel<D>, 6 * tile_bytes<D>());
    flash_backward_dq_mma_kernel<D>
        <<<grid_for(d.B * d.H * ((d.Tq + kFlashRows - 1) / kFlashRows)), kThreads, dq_bytes, stream>>>(
            a, qb, gb, kb, vb, stats, rowdot, dq, dqs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (mma.sync dQ)");
    const size_t dkv_bytes =
        allow_shared_bytes(flash_backward_dkv_mma_kernel<D>, 6 * tile_bytes<D>() + 2 * 3 * kCols * sizeof(float));
    flash_backward_dkv_mma_kernel<D>
        <<<grid_for(d.B * d.H * ((d.Tk + kFlashRows - 1) / kFlashRows)), kThreads, dkv_bytes, stream>>>(
            a, qb, gb, kb, vb, stats, rowdot, dk, dks, dv, dvs, accumulate);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (mma.sync dK dV)");
    rounded.release();
  });
}

}  // namespace qkv::kernels::cuda::flash
