// LayerNorm (kernels/layernorm.h) on device arrays: one block per row for the forward and for the
// backward's dx, and a two-stage column reduction (no atomics) for dweight and dbias.
//
// The CPU's arithmetic (kernels/layernorm.cpp), with its build's rounding (GCC contracts some
// products into FMAs; read off its assembly, and spelled out here with fmaf / __fmul_rn so nvcc
// cannot choose differently):
//   forward: mean and sum of squared deviations in double (two passes), rstd = 1 / sqrt(var + eps)
//   (or 1 / (std + eps)) in double, rounded to float; y = fma((x - mean) * rstd, weight, bias).
//   backward: per-row sums of g = dy * w and g * xhat in float; dx = rstd * fma(-xhat, gx,
//   fma(dy, w, -mean_g)), added as fma(rstd, ..., dx); dweight += sum dy * xhat, dbias += sum dy.
// RMSNorm (T5) is the same kernels with the mean taken as 0 and no bias: y = (x * rstd) * weight.
// Only the order of the sums differs from the CPU's serial loops (a tree here): the float sums of
// the backward therefore agree to rounding, the double ones of the forward almost always to the bit.
#include <algorithm>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

using detail::block_sum;
using detail::Scratch;

// Threads of a row's block: a warp per 128 columns, 1 to 8 warps.
unsigned row_threads(int64_t C) {
  const int64_t warps = std::clamp<int64_t>((C + 127) / 128, 1, 8);
  return static_cast<unsigned>(32 * warps);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535)); }


// ---- forward ------------------------------------------------------------------------------------

// One block per row (grid-stride over rows). With an addend, y's row first gets x + addend and is
// normalised there (add_layernorm_forward); each thread reads back only the columns it wrote, so no
// barrier is needed for them, and y may be x. mean / stat / stddev may be null. stat is rstd, or
// rdenom = 1 / (std + eps) with the unbiased std when kUnbiased.
// Which normalisation a forward computes: nn.LayerNorm's, seed 003's (unbiased std), or T5's RMSNorm
// (no mean, no bias: y = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps)).
enum class Norm { Standard, Unbiased, Rms };

template <Norm kNorm>
__global__ void layernorm_forward_kernel(float* y, float* mean, float* stat, float* stddev, const float* x,
                                         const float* addend, const float* weight, const float* bias,
                                         int64_t rows, int64_t C, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    if (addend) {
      const float* ar = addend + r * C;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = xr[c] + ar[c];
      xr = yr;
    }
    double m = 0.0;  // RMSNorm: the squares' sum is the deviations' from 0, as the CPU's
    if constexpr (kNorm != Norm::Rms) {
      double sum = 0.0;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
      m = block_sum(sum) / static_cast<double>(C);
    }
    double sq = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const double d = static_cast<double>(xr[c]) - m;
      sq = fma(d, d, sq);
    }
    const double sum_sq = block_sum(sq);
    float rs;
    if constexpr (kNorm == Norm::Unbiased) {
      const double s = sqrt(sum_sq / static_cast<double>(C - 1));  // torch's x.std(-1): C - 1
      if (stddev && threadIdx.x == 0) stddev[r] = static_cast<float>(s);
      rs = static_cast<float>(1.0 / (s + static_cast<double>(eps)));
    } else {
      rs = static_cast<float>(1.0 / sqrt(sum_sq / static_cast<double>(C) + static_cast<double>(eps)));
    }
    const float mf = static_cast<float>(m);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      if constexpr (kNorm == Norm::Rms)
        yr[c] = __fmul_rn(__fmul_rn(xr[c], rs), weight[c]);  // T5's order: weight * (x * rstd)
      else
        yr[c] = fmaf(__fmul_rn(__fsub_rn(xr[c], mf), rs), weight[c], bias[c]);
    }
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mf;
      if (stat) stat[r] = rs;
    }
  }
}

template <Norm kNorm>
void launch_forward(const char* name, float* y, float* mean, float* stat, float* stddev, const float* x,
                    const float* addend, const float* weight, const float* bias, int64_t rows, int64_t C, float eps) {
  if (rows <= 0 || C <= 0) return;
  layernorm_forward_kernel<kNorm><<<row_blocks(rows), row_threads(C), 0, qkv::cuda::current_stream()>>>(
      y, mean, stat, stddev, x, addend, weight, bias, rows, C, eps);
  QKV_CUDA_CHECK_LAUNCH(name);
}

// ---- backward: the normalised input and the coefficient of xhat ---------------------------------

// xhat = (x - mean) * rstd.
struct XHatFromInput {
  const float *x, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return __fmul_rn(__fsub_rn(x[r * C + c], mean[r]), rstd[r]);
  }
};

// xhat = (y - bias) / weight.
struct XHatFromOutput {
  const float *y, *weight, *bias;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return __fdiv_rn(__fsub_rn(y[r * C + c], bias[c]), weight[c]);
  }
};

// xhat = x * rstd (RMSNorm: no mean).
struct XHatRms {
  const float *x, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return __fmul_rn(x[r * C + c], rstd[r]); }
};

// nn.LayerNorm's coefficient of xhat in dx: mean(g * xhat) = sum_gx / C (a float division).
struct MeanOver {
  int64_t C;
  __device__ float operator()(int64_t, float sum_gx) const { return __fdiv_rn(sum_gx, static_cast<float>(C)); }
};

// Seed 003's: sum_gx * (s + eps) / ((C - 1) s) = sum_gx / ((C - 1) s rdenom) in double, 0 for a
// constant row (s = 0, or NaN), as the CPU's unbiased_std_term.
struct UnbiasedStdTerm {
  const float *rdenom, *stddev;
  int64_t C;
  __device__ float operator()(int64_t r, float sum_gx) const {
    if (!(stddev[r] > 0.f)) return 0.f;
    const double denom = static_cast<double>(C - 1) * static_cast<double>(stddev[r]) * static_cast<double>(rdenom[r]);
    return static_cast<float>(static_cast<double>(sum_gx) / denom);
  }
};

// dx of one row per block (grid-stride over rows): rstd * (g - mean(g) - xhat * gx_term(sum g xhat)).
// Not centred (RMSNorm), the mean(g) term is 0: there is no mean to differentiate through.
template <class XHat, class GxTerm>
__global__ void layernorm_dx_kernel(float* dx, const float* dy, const float* rstd, const float* weight,
                                    int64_t rows, int64_t C, bool accumulate_dx, XHat xhat_of, GxTerm gx_term,
                                    bool centred) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* dyr = dy + r * C;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = __fmul_rn(dyr[c], weight[c]);
      sum_g += g;
      sum_gx = fmaf(g, xhat_of(r, c), sum_gx);
    }
    const float total_g = block_sum(sum_g);
    const float mean_g = centred ? __fdiv_rn(total_g, static_cast<float>(C)) : 0.f;
    const float gx = gx_term(r, block_sum(sum_gx));
    const float rs = rstd[r];
    float* dxr = dx + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float inner = fmaf(-xhat_of(r, c), gx, fmaf(dyr[c], weight[c], -mean_g));
      dxr[c] = accumulate_dx ? fmaf(rs, inner, dxr[c]) : __fmul_rn(rs, inner);
    }
  }
}

// dweight and dbias, stage 1: block (32, 8) sums dy * xhat and dy for a 32-column tile over the rows
// r = blockIdx.y * 8 + threadIdx.y + k * gridDim.y * 8 (in float, as the CPU), combines its 8 row
// lanes in a fixed order, and writes the tile's partials to part_w / part_b[blockIdx.y, c].
constexpr int kTileCols = 32, kTileRows = 8;

template <class XHat>
__global__ void param_partials_kernel(float* part_w, float* part_b, const float* dy, int64_t rows, int64_t C,
                                      XHat xhat_of) {
  __shared__ float sw[kTileRows][kTileCols], sb[kTileRows][kTileCols];
  const int64_t c = blockIdx.x * int64_t{kTileCols} + threadIdx.x;
  float dw = 0.f, db = 0.f;
  if (c < C)
    for (int64_t r = blockIdx.y * int64_t{kTileRows} + threadIdx.y; r < rows; r += int64_t{gridDim.y} * kTileRows) {
      const float d = dy[r * C + c];
      dw = fmaf(d, xhat_of(r, c), dw);
      db += d;
    }
  sw[threadIdx.y][threadIdx.x] = dw;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float tw = 0.f, tb = 0.f;
  for (int k = 0; k < kTileRows; ++k) {
    tw += sw[k][threadIdx.x];
    tb += sb[k][threadIdx.x];
  }
  part_w[blockIdx.y * C + c] = tw;
  part_b[blockIdx.y * C + c] = tb;
}

// Stage 2: dweight[c] += the splits' partials, added in order (the same bits every run).
__global__ void add_param_partials_kernel(float* dweight, float* dbias, const float* part_w, const float* part_b,
                                          int64_t splits, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < C; c += int64_t{gridDim.x} * blockDim.x) {
    float tw = 0.f, tb = 0.f;
    for (int64_t s = 0; s < splits; ++s) {
      tw += part_w[s * C + c];
      tb += part_b[s * C + c];
    }
    dweight[c] += tw;
    if (dbias) dbias[c] += tb;
  }
}

// Every backward: dx per row, then dweight / dbias (always accumulated, as the CPU; dbias null for
// RMSNorm, which has none).
template <class XHat, class GxTerm>
void launch_backward(const char* name, float* dx, float* dweight, float* dbias, const float* dy, const float* rstd,
                     const float* weight, int64_t rows, int64_t C, bool accumulate_dx, XHat xhat_of,
                     GxTerm gx_term, bool centred = true) {
  if (rows <= 0 || C <= 0) return;
  cudaStream_t stream = qkv::cuda::current_stream();
  layernorm_dx_kernel<<<row_blocks(rows), row_threads(C), 0, stream>>>(dx, dy, rstd, weight, rows, C,
                                                                        accumulate_dx, xhat_of, gx_term, centred);
  QKV_CUDA_CHECK_LAUNCH(name);
  // About 64 rows per split, at most 128 splits.
  const int64_t splits = std::min<int64_t>(128, (rows + 63) / 64);
  Scratch partial(static_cast<size_t>(2 * splits * C) * sizeof(float), stream);
  float* part_w = partial.as<float>();
  float* part_b = part_w + splits * C;
  const dim3 grid(static_cast<unsigned>((C + kTileCols - 1) / kTileCols), static_cast<unsigned>(splits));
  param_partials_kernel<<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(part_w, part_b, dy, rows, C, xhat_of);
  QKV_CUDA_CHECK_LAUNCH(name);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((C + 255) / 256, 65535));
  add_param_partials_kernel<<<blocks, 256, 0, stream>>>(dweight, dbias, part_w, part_b, splits, C);
  QKV_CUDA_CHECK_LAUNCH(name);
  partial.release();
}

}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps) {
  launch_forward<Norm::Standard>("layernorm_forward", y, mean, rstd, nullptr, x, nullptr, weight, bias, rows, C, eps);
}

void add_layernorm_forward(float* y, const float* a, const float* b, const float* weight, const float* bias,
                           int64_t rows, int64_t C, float eps, bool unbiased) {
  if (unbiased)
    launch_forward<Norm::Unbiased>("add_layernorm_forward", y, nullptr, nullptr, nullptr, a, b, weight, bias, rows, C, eps);
  else
    launch_forward<Norm::Standard>("add_layernorm_forward", y, nullptr, nullptr, nullptr, a, b, weight, bias, rows, C, eps);
}

void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* weight, int64_t rows, int64_t C,
                        bool accumulate_dx) {
  launch_backward("layernorm_backward", dx, dweight, dbias, dy, rstd, weight, rows, C, accumulate_dx,
                  XHatFromInput{x, mean, rstd, C}, MeanOver{C});
}

void layernorm_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy, const float* y,
                                    const float* rstd, const float* weight, const float* bias, int64_t rows,
                                    int64_t C, bool accumulate_dx) {
  launch_backward("layernorm_backward_from_output", dx, dweight, dbias, dy, rstd, weight, rows, C, accumulate_dx,
                  XHatFromOutput{y, weight, bias, C}, MeanOver{C});
}

void layernorm_unbiased_forward(float* y, float* mean, float* rdenom, float* stddev, const float* x,
                                const float* weight, const float* bias, int64_t rows, int64_t C, float eps) {
  launch_forward<Norm::Unbiased>("layernorm_unbiased_forward", y, mean, rdenom, stddev, x, nullptr, weight, bias, rows, C,
                       eps);
}

void layernorm_unbiased_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                                 const float* mean, const float* rdenom, const float* stddev, const float* weight,
                                 int64_t rows, int64_t C, bool accumulate_dx) {
  launch_backward("layernorm_unbiased_backward", dx, dweight, dbias, dy, rdenom, weight, rows, C, accumulate_dx,
                  XHatFromInput{x, mean, rdenom, C}, UnbiasedStdTerm{rdenom, stddev, C});
}

void layernorm_unbiased_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy,
                                             const float* y, const float* rdenom, const float* stddev,
                                             const float* weight, const float* bias, int64_t rows, int64_t C,
                                             bool accumulate_dx) {
  launch_backward("layernorm_unbiased_backward_from_output", dx, dweight, dbias, dy, rdenom, weight, rows, C,
                  accumulate_dx, XHatFromOutput{y, weight, bias, C}, UnbiasedStdTerm{rdenom, stddev, C});
}

void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, int64_t rows, int64_t C, float eps) {
  launch_forward<Norm::Rms>("rms_norm_forward", y, nullptr, rstd, nullptr, x, nullptr, weight, nullptr, rows, C, eps);
}

void add_rms_norm_forward(float* y, const float* a, const float* b, const float* weight, int64_t rows, int64_t C,
                          float eps) {
  launch_forward<Norm::Rms>("add_rms_norm_forward", y, nullptr, nullptr, nullptr, a, b, weight, nullptr, rows, C, eps);
}

void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* rstd,
                       const float* weight, int64_t rows, int64_t C, bool accumulate_dx) {
  launch_backward("rms_norm_backward", dx, dweight, nullptr, dy, rstd, weight, rows, C, accumulate_dx,
                  XHatRms{x, rstd, C}, MeanOver{C}, /*centred=*/false);
}

}  // namespace qkv::kernels::cuda
