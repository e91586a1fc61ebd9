// Attention on the tensor cores in bf16, for ops/precision.h's BF16 on a GPU: FlashAttention-2's data
// flow (Dao 2023) with the float32 kernels' masks, dropout counters, statistics and two-kernel
// backward (flash_attention.cu), the products through WMMA's 16 x 16 x 16 bf16 fragments with
// float32 sums.
//
// What is rounded to bf16 (nearest even, as Tensor::to(BF16)): Q, K, V and dO as they are loaded,
// the (dropped-out) probabilities before P V, and dS before dS K and dS^T Q, which is what PyTorch's
// autocast SDPA and FlashAttention-2 round. Scores, the online softmax, its statistics (m, 1 / l),
// D_i = dO_i . O_i and every sum stay float32. The CPU's attention stays float32 in either precision,
// so the two agree within bf16's rounding (tests/cuda: 1e-2 of the largest value), not to float32's.
//
// Layout: a block of 4 warps owns 64 rows (queries; keys in the dK/dV kernel), a warp 16 of them; the
// other side passes by in tiles of 64. The operand tiles sit in shared memory as bf16 rows (row-major,
// D + 8 to a row); each warp multiplies its 16 rows into a float tile of its own, which its lanes
// read back two to a row (lane l: row l / 2, the columns of parity l % 2) for the softmax and the
// masks, and write the bf16 operand of the next product. The output and gradients accumulate in
// registers (the forward's O, whose rows the online softmax rescales) or in WMMA accumulators (dQ,
// dK, dV, which no rescaling touches).
#include <cuda_bf16.h>
#include <mma.h>

#include "qkv/kernels/cuda/flash_common.cuh"

namespace qkv::kernels::cuda {
namespace {

using namespace flash;
using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreadsBf16 = 32 * kWarps;
constexpr int kWarpRows = kFlashRows / kWarps;  // 16: one fragment's rows
constexpr int kCols = 64;                       // the other side's tile
constexpr int kLdS = kCols + 4;                 // floats to a row of a warp's score tile
constexpr int kLdP = kCols + 8;                 // bf16 to a row of a warp's probabilities or dS
static_assert(kWarpRows == 16 && kCols % 16 == 0, "WMMA fragments are 16 x 16");

template <int D>
constexpr int ld_tile() {  // bf16 to a row of an operand tile
  return D + 8;
}
template <int D>
constexpr int ld_out() {  // floats to a row of a warp's product of width D
  return D + 4;
}

constexpr size_t align128(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Shared memory: `tiles` operand tiles of 64 rows, then per warp two float tiles (16 x kLdS: scores,
// and dP in the backward; together they also hold a 16 x D product on its way out) and two bf16 ones
// (16 x kLdP), then `extra` floats.
template <int D>
struct Shared {
  static constexpr size_t tile = align128(size_t{64} * ld_tile<D>() * sizeof(bf16));
  static constexpr size_t scores = align128(size_t{kWarpRows} * kLdS * sizeof(float));
  static constexpr size_t probs = align128(size_t{kWarpRows} * kLdP * sizeof(bf16));
  static constexpr size_t warp = 2 * scores + 2 * probs;
  static_assert(size_t{kWarpRows} * ld_out<D>() * sizeof(float) <= 2 * scores, "a warp's product fits");
  static constexpr size_t bytes(int tiles, int extra_floats) {
    return tiles * tile + kWarps * warp + align128(size_t(extra_floats) * sizeof(float));
  }
};

// A warp's part of shared memory.
template <int D>
struct WarpTiles {
  float* scores;  // 16 x kLdS
  float* dp;      // 16 x kLdS, just after scores
  bf16* p;        // 16 x kLdP
  bf16* ds;       // 16 x kLdP
  __device__ WarpTiles(unsigned char* base) {
    unsigned char* mine = base + (threadIdx.x / 32) * Shared<D>::warp;
    scores = reinterpret_cast<float*>(mine);
    dp = reinterpret_cast<float*>(mine + Shared<D>::scores);
    p = reinterpret_cast<bf16*>(mine + 2 * Shared<D>::scores);
    ds = reinterpret_cast<bf16*>(mine + 2 * Shared<D>::scores + Shared<D>::probs);
  }
};

// dst[r][c] = bf16(x[first + r][c]) of head (b, h) for 64 rows and D columns, zeros past `count` rows
// or dk columns. All threads of the block call it; lanes run over columns (coalesced reads). With
// vec4 (every row 16-byte aligned and dk a multiple of 4: TileLoads), a float4 at a time.
template <int D>
__device__ void load_tile(bf16* dst, const float* x, HeadsView xs, int64_t b, int64_t h, int64_t first, int64_t count,
                          int64_t dk, bool vec4) {
  const float* head = x + b * xs.b + h * xs.h + first * xs.t;
  if (vec4) {
    for (int idx = threadIdx.x; idx < 64 * D / 4; idx += kThreadsBf16) {
      const int r = idx / (D / 4), c = 4 * (idx % (D / 4));
      const float4 f = r < count && c < dk ? *reinterpret_cast<const float4*>(head + r * xs.t + c)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
      __nv_bfloat162 lo = __floats2bfloat162_rn(f.x, f.y), hi = __floats2bfloat162_rn(f.z, f.w);
      uint2 packed;
      packed.x = *reinterpret_cast<unsigned*>(&lo);
      packed.y = *reinterpret_cast<unsigned*>(&hi);
      *reinterpret_cast<uint2*>(dst + r * ld_tile<D>() + c) = packed;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < 64 * D; idx += kThreadsBf16) {
    const int r = idx / D, c = idx % D;
    const float value = r < count && c < dk ? head[r * xs.t + c] : 0.f;
    dst[r * ld_tile<D>() + c] = __float2bfloat16_rn(value);
  }
}

// The score before masking in this form: q.k times 1 / divisor (a rounding from the float32 kernels'
// division, well inside bf16's), plus T5's bias where given (`inside` guards its read).
__device__ __forceinline__ float score_bf16(const FlashArgs& a, float qk, int64_t h, int64_t i, int64_t j,
                                            bool inside) {
  const float s = qk * a.inv_divisor;
  return a.mask.bias && inside ? s + a.mask.bias[(i * a.d.Tk + j) * a.d.H + h] : s;
}

// out (16 x kLdS floats) = A B^T for A the warp's 16 rows of an operand tile (16 x D) and B a whole
// tile (64 x D): each row of B is a column of the product (scores q.k, or dP = dO.v).
template <int D>
__device__ void product_with_rows(float* out, const bf16* A, const bf16* B) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kCols / 16];
#pragma unroll
  for (int n = 0; n < kCols / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
  for (int kk = 0; kk < D; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
    wmma::load_matrix_sync(a, A + kk, ld_tile<D>());
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n) {
      // B^T's element (k, n) is B[n][k]: B read column-major.
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bt;
      wmma::load_matrix_sync(bt, B + n * 16 * ld_tile<D>() + kk, ld_tile<D>());
      wmma::mma_sync(acc[n], a, bt, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kCols / 16; ++n) wmma::store_matrix_sync(out + n * 16, acc[n], kLdS, wmma::mem_row_major);
}

// acc[n] += L (16 x 64, bf16, kLdP to a row) @ R[:, 16 n .. 16 n + 16) for R a tile (64 x D).
template <int D>
__device__ void accumulate_product(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16], const bf16* L,
                                   const bf16* R) {
#pragma unroll
  for (int kk = 0; kk < kCols; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
    wmma::load_matrix_sync(a, L + kk, kLdP);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> r;
      wmma::load_matrix_sync(r, R + kk * ld_tile<D>() + n * 16, ld_tile<D>());
      wmma::mma_sync(acc[n], a, r, acc[n]);
    }
  }
}

// Writes the warp's accumulated 16 x D rows (row0 + r, r < 16) of head (b, h) to x, through `staging`
// (the warp's two float tiles): written, or added to when accumulate. Rows past rows_end and columns
// past dk are left alone.
template <int D>
__device__ void store_accumulated(float* x, HeadsView xs, int64_t b, int64_t h, int64_t row0, int64_t rows_end,
                                  int64_t dk, wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16],
                                  float* staging, bool accumulate) {
  __syncwarp();  // the warp's readers of the staging tiles are done
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(staging + n * 16, acc[n], ld_out<D>(), wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane / 2, parity = lane % 2;
  const int64_t row = row0 + r;
  if (row >= rows_end) return;
  float* dst = x + b * xs.b + h * xs.h + row * xs.t;
  for (int c = parity; c < dk && c < D; c += 2) {
    const float value = staging[r * ld_out<D>() + c];
    dst[c] = accumulate ? dst[c] + value : value;
  }
}

// The forward's part of shared memory for a warp: one float tile (its scores, then P V's 16 x D) and
// its probabilities; less than the backward's, so that more blocks fit on an SM.
template <int D>
struct ForwardShared {
  static constexpr int kFloatLd = kLdS > ld_out<D>() ? kLdS : ld_out<D>();
  static constexpr size_t floats = align128(size_t{kWarpRows} * kFloatLd * sizeof(float));
  static constexpr size_t warp = floats + Shared<D>::probs;
  static constexpr size_t bytes = 3 * Shared<D>::tile + kWarps * warp;
};

template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_forward_bf16_kernel(FlashArgs a, const float* q, HeadsView qs, const float* k, HeadsView ks, const float* v,
                              HeadsView vs, float* out, HeadsView os, float* stats, TileLoads vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = reinterpret_cast<bf16*>(smem + Shared<D>::tile);
  bf16* Vs = reinterpret_cast<bf16*>(smem + 2 * Shared<D>::tile);
  unsigned char* mine = smem + 3 * Shared<D>::tile + (threadIdx.x / 32) * ForwardShared<D>::warp;
  float* scores = reinterpret_cast<float*>(mine);
  float* pv = scores;  // P V's 16 x D, after the scores are read
  bf16* probs = reinterpret_cast<bf16*>(mine + ForwardShared<D>::floats);
  const AttentionDims& d = a.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, parity = lane % 2;
  const int64_t blocks_per_head = (d.Tq + kFlashRows - 1) / kFlashRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t i0 = (blk % blocks_per_head) * kFlashRows, i = i0 + warp * kWarpRows + r;
    const int64_t j_end = keys_end(a, min64(i0 + kFlashRows, d.Tq) - 1);
    __syncthreads();  // the previous block's readers are done
    load_tile<D>(Qs, q, qs, b, h, i0, d.Tq - i0, d.dk, vec4.q);
    float o[D / 2];
#pragma unroll
    for (int c = 0; c < D / 2; ++c) o[c] = 0.f;
    float m = -INFINITY, l = 0.f;
    for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
      const int64_t count = min64(kCols, j_end - j0);
      __syncthreads();  // the previous tile's readers are done
      load_tile<D>(Ks, k, ks, b, h, j0, count, d.dk, vec4.k);
      load_tile<D>(Vs, v, vs, b, h, j0, count, d.dk, vec4.v);
      __syncthreads();
      product_with_rows<D>(scores, Qs + warp * kWarpRows * ld_tile<D>(), Ks);
      __syncwarp();
      const bool masks = tile_has_masks(a, i0, j0, count, true);
      float s[kCols / 2];
      float tile_max = -INFINITY;
#pragma unroll
      for (int t = 0; t < kCols / 2; ++t) {
        const int c = 2 * t + parity;
        const bool inside = i < d.Tq && c < count;
        const float qk = scores[r * kLdS + c];
        s[t] = masks && inside && masked_at(a, b, i, j0 + c) ? a.mask.fill : score_bf16(a, qk, h, i, j0 + c, inside);
        if (c < count) tile_max = fmaxf(tile_max, s[t]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float m_new = fmaxf(m, tile_max);
      const float m_sub = finite_or_zero(m_new);
      const float rescale = expf(m - m_sub);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
#pragma unroll
      for (int t = 0; t < kCols / 2; ++t) {
        const int c = 2 * t + parity;
        const float e = c < count ? expf(s[t] - m_sub) : 0.f;
        sum += e;
        const float p = a.drop.p > 0.f && i < d.Tq && c < count
                            ? (dropout_kept(a, bh, i, j0 + c) ? e * a.keep_scale : 0.f)
                            : e;
        probs[r * kLdP + c] = __float2bfloat16_rn(p);
      }
      l = l * rescale + (sum + __shfl_xor_sync(0xffffffffu, sum, 1));
      m = m_new;
#pragma unroll
      for (int c = 0; c < D / 2; ++c) o[c] *= rescale;
      __syncwarp();  // P written, the scores read
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[D / 16];
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
      accumulate_product<D>(acc, probs, Vs);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(pv + n * 16, acc[n], ld_out<D>(), wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int t = 0; t < D / 2; ++t) o[t] += pv[r * ld_out<D>() + 2 * t + parity];
      __syncwarp();  // pv read before the next tile's scores overwrite it
    }
    if (i >= d.Tq) continue;
    const float inv = 1.f / l;
    float* dst = out + b * os.b + h * os.h + i * os.t;
#pragma unroll
    for (int t = 0; t < D / 2; ++t)
      if (2 * t + parity < d.dk) dst[2 * t + parity] = o[t] * inv;
    if (stats && parity == 0) {
      stats[2 * (bh * d.Tq + i)] = m;
      stats[2 * (bh * d.Tq + i) + 1] = inv;
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

// dQ for a block of 64 query rows; keys pass by in tiles of 64. dS = P (dP - D_i) / divisor, as the
// float32 kernel; its bf16 rounding multiplies K.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_backward_dq_bf16_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                                  const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                                  const float* rowdot, float* dq, HeadsView dqs, bool accumulate, TileLoads vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Gs = reinterpret_cast<bf16*>(smem + Shared<D>::tile);  // dO
  bf16* Ks = reinterpret_cast<bf16*>(smem + 2 * Shared<D>::tile);
  bf16* Vs = reinterpret_cast<bf16*>(smem + 3 * Shared<D>::tile);
  const WarpTiles<D> w(smem + 4 * Shared<D>::tile);
  const AttentionDims& d = a.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, parity = lane % 2;
  const int64_t blocks_per_head = (d.Tq + kFlashRows - 1) / kFlashRows;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t i0 = (blk % blocks_per_head) * kFlashRows, i = i0 + warp * kWarpRows + r;
    const int64_t j_end = keys_end(a, min64(i0 + kFlashRows, d.Tq) - 1);
    const float m = i < d.Tq ? stats[2 * (bh * d.Tq + i)] : 0.f;
    const float inv = i < d.Tq ? stats[2 * (bh * d.Tq + i) + 1] : 0.f;
    const float Di = i < d.Tq ? rowdot[bh * d.Tq + i] : 0.f;
    __syncthreads();
    load_tile<D>(Qs, q, qs, b, h, i0, d.Tq - i0, d.dk, vec4.q);
    load_tile<D>(Gs, dout, dos, b, h, i0, d.Tq - i0, d.dk, vec4.dout);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
    for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
      const int64_t count = min64(kCols, j_end - j0);
      __syncthreads();
      load_tile<D>(Ks, k, ks, b, h, j0, count, d.dk, vec4.k);
      load_tile<D>(Vs, v, vs, b, h, j0, count, d.dk, vec4.v);
      __syncthreads();
      product_with_rows<D>(w.scores, Qs + warp * kWarpRows * ld_tile<D>(), Ks);
      product_with_rows<D>(w.dp, Gs + warp * kWarpRows * ld_tile<D>(), Vs);
      __syncwarp();
      const bool masks = tile_has_masks(a, i0, j0, count, true);
#pragma unroll 4
      for (int t = 0; t < kCols / 2; ++t) {
        const int c = 2 * t + parity;
        const int64_t j = j0 + c;
        const bool inside = i < d.Tq && c < count;
        const bool live = inside && !(masks && masked_at(a, b, i, j));
        const float p = expf(score_bf16(a, w.scores[r * kLdS + c], h, i, j, inside) - m) * inv;
        float g = w.dp[r * kLdS + c];
        if (a.drop.p > 0.f) g = live && dropout_kept(a, bh, i, j) ? g * a.keep_scale : 0.f;
        const float dbias = live ? p * (g - Di) : 0.f;  // the CPU's order: (P (dP - D)) / divisor
        if (a.dbias_rows && inside) a.dbias_rows[(bh * d.Tq + i) * d.Tk + j] = dbias;
        w.ds[r * kLdP + c] = __float2bfloat16_rn(dbias * a.inv_divisor);
      }
      __syncwarp();
      accumulate_product<D>(acc, w.ds, Ks);
    }
    store_accumulated<D>(dq, dqs, b, h, i0 + warp * kWarpRows, d.Tq, d.dk, acc, w.scores, accumulate);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

// dK and dV for a block of 64 key rows; queries, their gradients and statistics pass by in tiles of 64.
// The warp's tiles are transposed: rows are its 16 keys, columns the tile's queries.
template <int D>
__global__ void __launch_bounds__(kThreadsBf16)
    flash_backward_dkv_bf16_kernel(FlashArgs a, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                                   const float* k, HeadsView ks, const float* v, HeadsView vs, const float* stats,
                                   const float* rowdot, float* dk, HeadsView dks, float* dv, HeadsView dvs,
                                   bool accumulate, TileLoads vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = reinterpret_cast<bf16*>(smem + Shared<D>::tile);
  bf16* Qs = reinterpret_cast<bf16*>(smem + 2 * Shared<D>::tile);
  bf16* Gs = reinterpret_cast<bf16*>(smem + 3 * Shared<D>::tile);  // dO
  const WarpTiles<D> w(smem + 4 * Shared<D>::tile);
  float* mt = reinterpret_cast<float*>(smem + 4 * Shared<D>::tile + kWarps * Shared<D>::warp);  // the tile's m
  float* invt = mt + kCols;                                                                    // 1 / l
  float* dt = invt + kCols;                                                                    // D_i
  const AttentionDims& d = a.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, parity = lane % 2;
  const int64_t blocks_per_head = (d.Tk + kFlashRows - 1) / kFlashRows;
  const int64_t offset = d.Tk - d.Tq;
  for (int64_t blk = blockIdx.x; blk < d.B * d.H * blocks_per_head; blk += gridDim.x) {
    const int64_t bh = blk / blocks_per_head, b = bh / d.H, h = bh % d.H;
    const int64_t j0 = (blk % blocks_per_head) * kFlashRows, j = j0 + warp * kWarpRows + r;
    // Queries before j0 - offset see none of these keys (causal): their tiles are skipped.
    const int64_t i_begin = a.skip_causal ? max64(0, j0 - offset) : 0;
    __syncthreads();
    load_tile<D>(Ks, k, ks, b, h, j0, d.Tk - j0, d.dk, vec4.k);
    load_tile<D>(Vs, v, vs, b, h, j0, d.Tk - j0, d.dk, vec4.v);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_k[D / 16], acc_v[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::fill_fragment(acc_k[n], 0.f);
      wmma::fill_fragment(acc_v[n], 0.f);
    }
    for (int64_t i0 = i_begin; i0 < d.Tq; i0 += kCols) {
      const int64_t count = min64(kCols, d.Tq - i0);
      __syncthreads();
      load_tile<D>(Qs, q, qs, b, h, i0, count, d.dk, vec4.q);
      load_tile<D>(Gs, dout, dos, b, h, i0, count, d.dk, vec4.dout);
      if (threadIdx.x < count) {
        const int64_t row = bh * d.Tq + i0 + threadIdx.x;
        mt[threadIdx.x] = stats[2 * row];
        invt[threadIdx.x] = stats[2 * row + 1];
        dt[threadIdx.x] = rowdot[row];
      }
      __syncthreads();
      product_with_rows<D>(w.scores, Ks + warp * kWarpRows * ld_tile<D>(), Qs);  // S^T = K Q^T
      product_with_rows<D>(w.dp, Vs + warp * kWarpRows * ld_tile<D>(), Gs);      // dP^T = V dO^T
      __syncwarp();
      const bool masks = tile_has_masks(a, j0, i0, count, false);
#pragma unroll 4
      for (int t = 0; t < kCols / 2; ++t) {
        const int c = 2 * t + parity;
        const int64_t i = i0 + c;
        const bool present = c < count && j < d.Tk;
        const bool masked = !present || (masks && masked_at(a, b, i, j));
        const float sc = masked ? a.mask.fill : score_bf16(a, w.scores[r * kLdS + c], h, i, j, true);
        const float p = present ? expf(sc - mt[c]) * invt[c] : 0.f;
        float g = w.dp[r * kLdS + c], pd = p;
        if (a.drop.p > 0.f) {
          const bool keep = present && dropout_kept(a, bh, i, j);
          pd = keep ? p * a.keep_scale : 0.f;
          g = keep ? g * a.keep_scale : 0.f;
        }
        const float ds = masked ? 0.f : p * (g - dt[c]) * a.inv_divisor;
        w.p[r * kLdP + c] = __float2bfloat16_rn(pd);
        w.ds[r * kLdP + c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      accumulate_product<D>(acc_v, w.p, Gs);   // dV += Pd^T dO
      accumulate_product<D>(acc_k, w.ds, Qs);  // dK += dS^T Q
    }
    store_accumulated<D>(dk, dks, b, h, j0 + warp * kWarpRows, d.Tk, d.dk, acc_k, w.scores, accumulate);
    store_accumulated<D>(dv, dvs, b, h, j0 + warp * kWarpRows, d.Tk, d.dk, acc_v, w.scores, accumulate);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without bf16 tensor cores: fail, never leave the outputs unwritten
#endif
}

void check_bf16_fits(const AttentionDims& d, const char* what) {
  QKV_CHECK(flash_attention_fits(d), what << ": dk = " << d.dk << ", Tq = " << d.Tq << ", Tk = " << d.Tk
                                          << " (it takes 1 <= dk <= 128 and non-empty rows)");
  QKV_CHECK(flash_bf16_supported(), what << ": bf16 tensor-core attention needs a GPU of compute capability 8.0 "
                                            "or later (A100, H100)");
}

}  // namespace

bool flash_bf16_supported() {
  int device = 0, major = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

void flash_attention_forward_bf16(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                                  const float* v, HeadsView vs, float* out, HeadsView os, float* stats,
                                  const AttentionMask& mask, const AttentionDropout& drop) {
  check_bf16_fits(d, "flash attention (bf16)");
  if (d.B * d.H == 0) return;
  const FlashArgs a = flash_args(d, mask, drop);
  const TileLoads vec4{rows_of_16_bytes(q, qs, d.dk), rows_of_16_bytes(k, ks, d.dk), rows_of_16_bytes(v, vs, d.dk),
                       false};
  if (flash_mma_form() != MmaForm::Off) {
    flash_forward_mma(a, q, qs, k, ks, v, vs, out, os, stats, vec4, qkv::cuda::current_stream());
    QKV_CUDA_CHECK_LAUNCH("flash_attention_forward_bf16 (mma.sync)");
    return;
  }
  const int64_t blocks = d.B * d.H * ((d.Tq + kFlashRows - 1) / kFlashRows);
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    const size_t bytes = allow_shared_bytes(flash_forward_bf16_kernel<D>, ForwardShared<D>::bytes);
    flash_forward_bf16_kernel<D><<<grid_for(blocks), kThreadsBf16, bytes, qkv::cuda::current_stream()>>>(
        a, q, qs, k, ks, v, vs, out, os, stats, vec4);
  });
  QKV_CUDA_CHECK_LAUNCH("flash_attention_forward_bf16");
}

void flash_attention_backward_bf16(const AttentionDims& d, const float* dout, HeadsView dos, const float* q,
                                   HeadsView qs, const float* k, HeadsView ks, const float* v, HeadsView vs,
                                   const float* out, HeadsView os, const float* stats, const AttentionMask& mask,
                                   const AttentionDropout& drop, float* dq, HeadsView dqs, float* dk, HeadsView dks,
                                   float* dv, HeadsView dvs, bool accumulate, float* dbias_rows) {
  check_bf16_fits(d, "flash attention backward (bf16)");
  if (d.B * d.H == 0) return;
  FlashArgs a = flash_args(d, mask, drop);
  a.dbias_rows = dbias_rows;
  const TileLoads vec4{rows_of_16_bytes(q, qs, d.dk), rows_of_16_bytes(k, ks, d.dk), rows_of_16_bytes(v, vs, d.dk),
                       rows_of_16_bytes(dout, dos, d.dk)};
  cudaStream_t stream = qkv::cuda::current_stream();
  if (dbias_rows)  // the tiles a causal mask skips are never visited: their entries stay 0
    QKV_CUDA_CHECK(cudaMemsetAsync(dbias_rows, 0, static_cast<size_t>(d.B * d.H * d.Tq * d.Tk) * sizeof(float), stream));
  detail::Scratch rowdot(static_cast<size_t>(d.B * d.H * d.Tq) * sizeof(float), stream);
  launch_rowdot(d, dout, dos, out, os, rowdot.as<float>(), stream);
  if (flash_mma_form() == MmaForm::Both) {
    flash_backward_mma(a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dq, dqs, dk, dks, dv, dvs,
                       accumulate, vec4, stream);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (mma.sync)");
    rowdot.release();
    return;
  }
  with_width(d.dk, [&](auto width) {
    constexpr int D = decltype(width)::value;
    const size_t dq_bytes = allow_shared_bytes(flash_backward_dq_bf16_kernel<D>, Shared<D>::bytes(4, 0));
    flash_backward_dq_bf16_kernel<D>
        <<<grid_for(d.B * d.H * ((d.Tq + kFlashRows - 1) / kFlashRows)), kThreadsBf16, dq_bytes, stream>>>(
            a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dq, dqs, accumulate, vec4);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (dQ)");
    const size_t dkv_bytes = allow_shared_bytes(flash_backward_dkv_bf16_kernel<D>, Shared<D>::bytes(4, 3 * kCols));
    flash_backward_dkv_bf16_kernel<D>
        <<<grid_for(d.B * d.H * ((d.Tk + kFlashRows - 1) / kFlashRows)), kThreadsBf16, dkv_bytes, stream>>>(
            a, dout, dos, q, qs, k, ks, v, vs, stats, rowdot.as<float>(), dk, dks, dv, dvs, accumulate, vec4);
    QKV_CUDA_CHECK_LAUNCH("flash_attention_backward_bf16 (dK, dV)");
  });
  rowdot.release();
}

}  // namespace qkv::kernels::cuda
