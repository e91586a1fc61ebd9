// Scaled dot-product attention on the GPU: the twin of kernels/attention.cpp (same views, masks,
// dropout counters and gradients; see kernels/attention.h for the math).
//
// A first, simple version (a later one is to be FlashAttention): one block per query row (b, h, i)
// holds that row's Tk scores in dynamic shared memory; a warp per key computes a score (lanes over
// dk, reads of a key row coalesced), threads over keys do the softmax, and threads over dk (in
// groups that split the keys) the weighted sum of value rows. Backward is two kernels, neither with
// atomics: one per query row writes the row of dS to a (B, H, Tq, Tk) scratch buffer and its dQ row,
// then one per key row j sums over the queries for dK_j and dV_j.
//
// Limits: a block's shared memory holds (Tk + dk + 256) floats (forward, backward per query) and
// (2 Tq + 256) floats (backward per key); up to 48 KiB needs nothing, beyond that the kernel opts in
// to the device's maximum (227 KiB on an H100: Tk + dk up to about 57,800, Tq up to about 28,900),
// and past it the call throws a qkv::Error naming Tk or Tq. Backward allocates B*H*Tq*Tk floats of
// scratch (the size of probs) for the call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/kernels/random.h"

namespace qkv::kernels::cuda {
namespace {

using detail::block_reduce;
using detail::Max;
using detail::Sum;
using detail::warp_sum;

constexpr int kThreads = 256;
// Rows past this many blocks are taken by the same blocks again (grid-stride loops).
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// Dynamic shared memory a kernel may use without opting in (less a margin for its static shared).
constexpr size_t kSharedWithoutOptIn = 48 * 1024 - 1024;

// fill_masked's test: the whole row of a dropped query, keys after the query's position when
// causal, dropped keys.
__device__ __forceinline__ bool is_masked(const AttentionMask& m, const AttentionDims& d, int64_t b, int64_t i,
                                          int64_t j, bool row_dropped) {
  return row_dropped || (m.causal && j > i + (d.Tk - d.Tq)) || (m.key_keep && m.key_keep[b * d.Tk + j] == 0);
}

// store(c, sum_{j < n} w[j] * row_at(j)[c]) for c < dk; w in shared memory, written before the call
// and followed by a barrier. When dk leaves threads over, the block splits j into groups whose
// partial sums meet in `part` (blockDim.x floats of shared memory). All threads must call it.
template <class Rows, class Store>
__device__ void weighted_sum(const float* w, int64_t n, const Rows& row_at, int64_t dk, float* part,
                             const Store& store) {
  const int64_t nt = blockDim.x, t = threadIdx.x;
  if (dk <= 0) return;
  if (2 * dk > nt) {  // one group: each thread its columns, over every j
    for (int64_t c = t; c < dk; c += nt) {
      float acc = 0.f;
      for (int64_t j = 0; j < n; ++j) acc += w[j] * row_at(j)[c];
      store(c, acc);
    }
    return;
  }
  const int64_t groups = nt / dk, g = t / dk, c = t % dk;
  float acc = 0.f;
  if (g < groups)
    for (int64_t j = g; j < n; j += groups) acc += w[j] * row_at(j)[c];
  __syncthreads();  // an earlier call's readers of `part` are done
  if (g < groups) part[g * dk + c] = acc;
  __syncthreads();
  if (t < dk) {
    float s = 0.f;
    for (int64_t k = 0; k < groups; ++k) s += part[k * dk + t];
    store(t, s);
  }
}

// One block per query row r = (b*H + h)*Tq + i. Shared: scores (Tk) | q row (dk) | partials.
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(AttentionDims d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                             const float* v, HeadsView vs, float* out, HeadsView os, float* probs, AttentionMask mask,
                             AttentionDropout drop, KeyRows key_rows, float divisor, float keep_scale) {
  extern __shared__ float smem[];
  float* row = smem;
  float* qrow = row + d.Tk;
  float* part = qrow + d.dk;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t rows_total = d.B * d.H * d.Tq;
  for (int64_t r = blockIdx.x; r < rows_total; r += gridDim.x) {
    const int64_t i = r % d.Tq, bh = r / d.Tq, b = bh / d.H, h = bh % d.H;
    // Key and value j of batch row b live in batch row kv_row(j) (beam search's mapped cache).
    const int32_t* map = key_rows.rows ? key_rows.rows + b * key_rows.stride : nullptr;
    const auto kv_row = [&](int64_t j) -> int64_t { return map ? map[j] : b; };

    __syncthreads();  // the previous row's readers of shared memory are done
    const float* qi = q + b * qs.b + h * qs.h + i * qs.t;
    for (int64_t c = threadIdx.x; c < d.dk; c += blockDim.x) qrow[c] = qi[c];
    __syncthreads();

    // Scores: q.k / sqrt(dk) (a division by the float divisor, as the CPU; 1 for T5), plus T5's
    // position bias (Tq, Tk, H) where given; masked ones the fill.
    const bool dropped = mask.query_keep && mask.query_keep[b * d.Tq + i] == 0;
    for (int64_t j = warp; j < d.Tk; j += warps) {
      if (is_masked(mask, d, b, i, j, dropped)) {
        if (lane == 0) row[j] = mask.fill;
        continue;
      }
      const float* kj = k + kv_row(j) * ks.b + h * ks.h + j * ks.t;
      float s = 0.f;
      for (int64_t c = lane; c < d.dk; c += 32) s += qrow[c] * kj[c];
      s = warp_sum(s);
      if (lane == 0) row[j] = mask.bias ? s / divisor + mask.bias[(i * d.Tk + j) * d.H + h] : s / divisor;
    }
    __syncthreads();

    // Softmax as softmax_row: exp(x - max), then times 1 / sum. Each thread rewrites only its own j.
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_reduce(mx, Max{});
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x) {
      const float e = expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    sum = block_reduce(sum, Sum{});
    const float inv = 1.f / sum;
    float* pr = probs ? probs + r * d.Tk : nullptr;
    const uint64_t counter = drop.offset + static_cast<uint64_t>(r * d.Tk);
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x) {
      float p = row[j] * inv;
      if (pr) pr[j] = p;
      // Pd = P * (1 / (1 - p)) where kept, 0 where dropped (dropout_row).
      if (drop.p > 0.f) p = dropout_keep(drop.seed, counter + static_cast<uint64_t>(j), drop.p) ? p * keep_scale : 0.f;
      row[j] = p;
    }
    __syncthreads();

    // O_i = Pd_i @ V
    float* oi = out + b * os.b + h * os.h + i * os.t;
    weighted_sum(
        row, d.Tk, [&](int64_t j) { return v + kv_row(j) * vs.b + h * vs.h + j * vs.t; }, d.dk, part,
        [&](int64_t c, float x) { oi[c] = x; });
  }
}

// Backward, per query row r: dPd = dO_i V^T, dP = dropout_mask(dPd), dS = P (dP - dP.P) / sqrt(dk),
// masked entries 0; writes the row of dS to ds_all (and, unless dbias is null, of dS before the
// division to dbias: T5's bias gradient) and dQ_i = dS_i K. Shared: dS row (Tk) | dO row (dk) |
// partials.
__global__ void __launch_bounds__(kThreads)
    attention_backward_rows_kernel(AttentionDims d, const float* dout, HeadsView dos, const float* k, HeadsView ks,
                                   const float* v, HeadsView vs, const float* probs, AttentionMask mask,
                                   AttentionDropout drop, float* ds_all, float* dbias, float* dq, HeadsView dqs,
                                   bool accumulate, float inv_divisor, float keep_scale) {
  extern __shared__ float smem[];
  float* row = smem;
  float* dorow = row + d.Tk;
  float* part = dorow + d.dk;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t rows_total = d.B * d.H * d.Tq;
  for (int64_t r = blockIdx.x; r < rows_total; r += gridDim.x) {
    const int64_t i = r % d.Tq, bh = r / d.Tq, b = bh / d.H, h = bh % d.H;
    __syncthreads();  // the previous row's readers of shared memory are done
    const float* doi = dout + b * dos.b + h * dos.h + i * dos.t;
    for (int64_t c = threadIdx.x; c < d.dk; c += blockDim.x) dorow[c] = doi[c];
    __syncthreads();

    // dPd_ij = dO_i . V_j for every j, masked or not (the CPU's product covers the whole row).
    for (int64_t j = warp; j < d.Tk; j += warps) {
      const float* vj = v + b * vs.b + h * vs.h + j * vs.t;
      float s = 0.f;
      for (int64_t c = lane; c < d.dk; c += 32) s += dorow[c] * vj[c];
      s = warp_sum(s);
      if (lane == 0) row[j] = s;
    }
    __syncthreads();

    const float* pr = probs + r * d.Tk;
    const uint64_t counter = drop.offset + static_cast<uint64_t>(r * d.Tk);
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x) {
      float dp = row[j];
      if (drop.p > 0.f) dp = dropout_keep(drop.seed, counter + static_cast<uint64_t>(j), drop.p) ? dp * keep_scale : 0.f;
      row[j] = dp;
      dot += dp * pr[j];
    }
    dot = block_reduce(dot, Sum{});
    const bool dropped = mask.query_keep && mask.query_keep[b * d.Tq + i] == 0;
    float* dsr = ds_all + r * d.Tk;
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x) {
      // The CPU's order: (P * (dP - dot)) * (1 / sqrt(dk)), then the masked entries zeroed.
      const float unscaled = is_masked(mask, d, b, i, j, dropped) ? 0.f : pr[j] * (row[j] - dot);
      const float ds = unscaled * inv_divisor;
      if (dbias) dbias[r * d.Tk + j] = unscaled;
      row[j] = ds;
      dsr[j] = ds;
    }
    __syncthreads();

    // dQ_i = dS_i @ K (the 1 / sqrt(dk) already in dS)
    float* dqi = dq + b * dqs.b + h * dqs.h + i * dqs.t;
    weighted_sum(
        row, d.Tk, [&](int64_t j) { return k + b * ks.b + h * ks.h + j * ks.t; }, d.dk, part,
        [&](int64_t c, float x) { dqi[c] = accumulate ? dqi[c] + x : x; });
  }
}

// Backward, per key row r = (b*H + h)*Tk + j: dV_j = sum_i Pd_ij dO_i and dK_j = sum_i dS_ij Q_i.
// Each block owns its rows of dK and dV: no races, no atomics. Shared: Pd column (Tq) | dS column
// (Tq) | partials.
__global__ void __launch_bounds__(kThreads)
    attention_backward_keys_kernel(AttentionDims d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                                   const float* probs, const float* ds_all, AttentionDropout drop, float* dk,
                                   HeadsView dks, float* dv, HeadsView dvs, bool accumulate, float keep_scale) {
  extern __shared__ float smem[];
  float* pcol = smem;
  float* dscol = pcol + d.Tq;
  float* part = dscol + d.Tq;
  const int64_t rows_total = d.B * d.H * d.Tk;
  for (int64_t r = blockIdx.x; r < rows_total; r += gridDim.x) {
    const int64_t j = r % d.Tk, bh = r / d.Tk, b = bh / d.H, h = bh % d.H;
    __syncthreads();  // the previous row's readers of shared memory are done
    for (int64_t i = threadIdx.x; i < d.Tq; i += blockDim.x) {
      const int64_t at = (bh * d.Tq + i) * d.Tk + j;
      float p = probs[at];
      if (drop.p > 0.f) p = dropout_keep(drop.seed, drop.offset + static_cast<uint64_t>(at), drop.p) ? p * keep_scale : 0.f;
      pcol[i] = p;
      dscol[i] = ds_all[at];
    }
    __syncthreads();

    float* dvj = dv + b * dvs.b + h * dvs.h + j * dvs.t;
    weighted_sum(
        pcol, d.Tq, [&](int64_t i) { return dout + b * dos.b + h * dos.h + i * dos.t; }, d.dk, part,
        [&](int64_t c, float x) { dvj[c] = accumulate ? dvj[c] + x : x; });
    float* dkj = dk + b * dks.b + h * dks.h + j * dks.t;
    weighted_sum(
        dscol, d.Tq, [&](int64_t i) { return q + b * qs.b + h * qs.h + i * qs.t; }, d.dk, part,
        [&](int64_t c, float x) { dkj[c] = accumulate ? dkj[c] + x : x; });
  }
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>(std::min(rows, kMaxBlocks)); }

// Lets `kernel` use `bytes` of dynamic shared memory, opting in past the default 48 KiB; throws when
// the device has less (`what` names the call, `size_name` = `size` the dimension that asked, `layout`
// what the block holds).
template <class Kernel>
void allow_shared(Kernel* kernel, size_t bytes, const char* what, const char* size_name, int64_t size,
                  const char* layout) {
  if (bytes <= kSharedWithoutOptIn) return;
  int device = 0, optin = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  QKV_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const size_t limit = static_cast<size_t>(optin) - std::min(static_cast<size_t>(optin), attributes.sharedSizeBytes);
  QKV_CHECK(bytes <= limit, what << ": " << size_name << " = " << size << " needs " << bytes
                                 << " bytes of shared memory per block (" << layout << " floats); this GPU allows "
                                 << limit << " bytes");
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// The CPU's divisor: math.sqrt(d_k) as a double, applied to float scores as that float; T5 divides
// by exactly 1.
float divisor_of(const AttentionMask& mask, int64_t dk) {
  return mask.scale_scores ? static_cast<float>(std::sqrt(static_cast<double>(dk))) : 1.f;
}

// dbias[ij, h] = sum over b of ds[b, h, ij], b in order from 0.f (the CPU's sum), a thread per (ij, h).
__global__ void bias_grad_kernel(AttentionDims d, const float* ds, float* dbias) {
  const int64_t area = d.Tq * d.Tk, n = area * d.H;
  for (int64_t at = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; at < n; at += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ij = at / d.H, h = at % d.H;
    float sum = 0.f;
    for (int64_t b = 0; b < d.B; ++b) sum += ds[(b * d.H + h) * area + ij];
    dbias[at] = sum;
  }
}
// dropout_row's scale.
float keep_scale_of(float p) { return p > 0.f ? 1.f / (1.f - p) : 1.f; }

}  // namespace

void attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                       const float* v, HeadsView vs, float* out, HeadsView os, float* probs,
                       const AttentionMask& mask, const AttentionDropout& drop, const KeyRows& key_rows) {
  // Tk == 0 or dk == 0 still runs: the CPU then writes zero outputs (or NaN probs, 0 / 0 scores).
  const int64_t rows = d.B * d.H * d.Tq;
  if (rows <= 0) return;
  const size_t shared = static_cast<size_t>(d.Tk + d.dk + kThreads) * sizeof(float);
  allow_shared(attention_forward_kernel, shared, "attention_forward", "Tk", d.Tk, "Tk + dk + 256");
  attention_forward_kernel<<<blocks_for(rows), kThreads, shared, qkv::cuda::current_stream()>>>(
      d, q, qs, k, ks, v, vs, out, os, probs, mask, drop, key_rows, divisor_of(mask, d.dk), keep_scale_of(drop.p));
  QKV_CUDA_CHECK_LAUNCH("attention_forward");
}

void attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const float* probs,
                        const AttentionMask& mask, const AttentionDropout& drop, float* dq, HeadsView dqs,
                        float* dk, HeadsView dks, float* dv, HeadsView dvs, bool accumulate, float* dbias) {
  if (d.B <= 0 || d.H <= 0) return;
  const int64_t query_rows = d.B * d.H * d.Tq, key_count = d.B * d.H * d.Tk;
  // As the CPU: 1 / (float divisor), folded into dS.
  const float inv_divisor = 1.f / divisor_of(mask, d.dk);
  const float keep_scale = keep_scale_of(drop.p);
  const size_t rows_shared = static_cast<size_t>(d.Tk + d.dk + kThreads) * sizeof(float);
  const size_t keys_shared = static_cast<size_t>(2 * d.Tq + kThreads) * sizeof(float);
  if (query_rows > 0)
    allow_shared(attention_backward_rows_kernel, rows_shared, "attention_backward", "Tk", d.Tk, "Tk + dk + 256");
  if (key_count > 0)
    allow_shared(attention_backward_keys_kernel, keys_shared, "attention_backward", "Tq", d.Tq, "2 Tq + 256");

  cudaStream_t stream = qkv::cuda::current_stream();
  float* ds_all = nullptr;  // dS, (B, H, Tq, Tk)
  const int64_t area = query_rows * d.Tk;
  if (area > 0)
    QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ds_all), static_cast<size_t>(area) * sizeof(float), stream));
  try {
    // Tq == 0 or Tk == 0 still writes: the CPU's products over an empty dimension give zeros
    // (or leave the gradient as it was when accumulating).
    if (query_rows > 0) {
      attention_backward_rows_kernel<<<blocks_for(query_rows), kThreads, rows_shared, stream>>>(
          d, dout, dos, k, ks, v, vs, probs, mask, drop, ds_all, dbias, dq, dqs, accumulate, inv_divisor, keep_scale);
      QKV_CUDA_CHECK_LAUNCH("attention_backward (query rows)");
    }
    if (key_count > 0) {
      attention_backward_keys_kernel<<<blocks_for(key_count), kThreads, keys_shared, stream>>>(
          d, dout, dos, q, qs, probs, ds_all, drop, dk, dks, dv, dvs, accumulate, keep_scale);
      QKV_CUDA_CHECK_LAUNCH("attention_backward (key rows)");
    }
    if (ds_all) {
      float* done = ds_all;
      ds_all = nullptr;
      QKV_CUDA_CHECK(cudaFreeAsync(done, stream));
    }
  } catch (...) {
    if (ds_all) (void)cudaFreeAsync(ds_all, stream);
    throw;
  }
}

void attention_bias_grad(const AttentionDims& d, const float* ds, float* dbias) {
  const int64_t n = d.Tq * d.Tk * d.H;
  if (n <= 0) return;
  bias_grad_kernel<<<blocks_for((n + kThreads - 1) / kThreads), kThreads, 0, qkv::cuda::current_stream()>>>(d, ds,
                                                                                                             dbias);
  QKV_CUDA_CHECK_LAUNCH("attention_bias_grad");
}

}  // namespace qkv::kernels::cuda
