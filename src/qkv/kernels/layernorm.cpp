#include "qkv/kernels/layernorm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace qkv::kernels {

namespace {
// Sum of x[0..C) in double, eight lanes at a time (two vectors of four doubles): a serial double sum
// waits for the previous add (4 cycles) at every element, and LayerNorm was 3.4% of an embedding
// run with MiniLM. The order differs from a serial sum only far below float precision (29 extra
// bits), so the float mean and scale almost never move (LegacyCheckpoint still resumes bit for bit).
double sum_in_double(const float* x, int64_t C) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(lo, hi));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; c < C; ++c) sum += x[c];
  return sum;
}

// Sum of (x - m)^2 in double, as sum_in_double.
double squared_deviations_in_double(const float* x, int64_t C, double m) {
  const __m256d mv = _mm256_set1_pd(m);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    const __m256d dlo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), mv);
    const __m256d dhi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), mv);
    lo = _mm256_fmadd_pd(dlo, dlo, lo);
    hi = _mm256_fmadd_pd(dhi, dhi, hi);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(lo, hi));
  double sq = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
  return sq;
}

// Row r of the input to normalise: x's own, or x + addend formed in y's row.
const float* row_to_normalise(float* y, const float* x, const float* addend, int64_t r, int64_t C) {
  if (!addend) return x + r * C;
  float* yr = y + r * C;
  for (int64_t c = 0; c < C; ++c) yr[c] = x[r * C + c] + addend[r * C + c];
  return yr;
}

// Shared body of every forward. Per row, the mean and the sum of squared deviations in two passes
// in double (the variance of a row with a large mean stays exact); scale_of(r, sum_sq) returns the
// factor of x - mean (and may save a statistic of row r). With an addend, the row normalised is
// x + addend, summed into y's row first and normalised there (the same bits as adding apart);
// mean and rstd may then be null (inference keeps no statistics).
template <class Scale>
void layernorm_forward_impl(float* y, float* mean, float* rstd, const float* x, const float* addend,
                            const float* weight, const float* bias, int64_t rows, int64_t C, Scale scale_of) {
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = row_to_normalise(y, x, addend, r, C);
    float* yr = y + r * C;
    const double m = sum_in_double(xr, C) / C;
    const float rs = scale_of(r, squared_deviations_in_double(xr, C, m));
    const float mf = static_cast<float>(m);
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mf) * rs * weight[c] + bias[c];
    if (mean) mean[r] = mf;
    if (rstd) rstd[r] = rs;
  }
}

float standard_scale(double sum_sq, int64_t C, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum_sq / C + eps));
}

// 1 / (std + eps) with the unbiased std, which is saved when `stddev` is not null.
float unbiased_scale(double sum_sq, int64_t C, float eps, float* stddev) {
  const double s = std::sqrt(sum_sq / static_cast<double>(C - 1));
  if (stddev) *stddev = static_cast<float>(s);
  return static_cast<float>(1.0 / (s + eps));
}

// Parameter gradients, dweight += sum_rows dy * xhat and (when dbias is not null) dbias += sum_rows dy:
// each thread owns a block of columns, so no two threads write one address.
template <class XHat>
void accumulate_param_grads(float* dweight, float* dbias, const float* dy, int64_t rows, int64_t C, XHat xhat_of) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
    float dw[kBlock] = {}, db[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * C;
      for (int64_t c = c0; c < c1; ++c) {
        dw[c - c0] += dyr[c] * xhat_of(r, c);
        db[c - c0] += dyr[c];
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      dweight[c] += dw[c - c0];
      if (dbias) dbias[c] += db[c - c0];
    }
  }
}

// Shared body of every backward: xhat_of(r, c) returns the normalised input, rstd[r] is the factor
// xhat = (x - mean) * rstd, and gx_term(r, sum_gx) turns sum_c g_c xhat_c into the coefficient of
// xhat in dx (mean(g * xhat) for nn.LayerNorm; see layernorm.h for seed 003's). centred: the input
// had its mean taken off, so dx loses mean(g) too; RMSNorm's (no mean) does not. dbias may be null.
template <class XHat, class GxTerm>
void layernorm_backward_impl(float* dx, float* dweight, float* dbias, const float* dy, const float* rstd,
                             const float* weight, int64_t rows, int64_t C, bool accumulate_dx, XHat xhat_of,
                             GxTerm gx_term, bool centred = true) {
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * C;
    const float rs = rstd[r];
    float mean_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float g = dyr[c] * weight[c];
      mean_g += g;
      sum_gx += g * xhat_of(r, c);
    }
    mean_g = centred ? mean_g / C : 0.f;  // g - 0 is g exactly: RMSNorm's dx below
    const float gx = gx_term(r, sum_gx);
    float* dxr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float v = rs * (dyr[c] * weight[c] - mean_g - xhat_of(r, c) * gx);
      dxr[c] = accumulate_dx ? dxr[c] + v : v;
    }
  }
  accumulate_param_grads(dweight, dbias, dy, rows, C, xhat_of);
}

auto xhat_from_input(const float* x, const float* mean, const float* rstd, int64_t C) {
  return [=](int64_t r, int64_t c) { return (x[r * C + c] - mean[r]) * rstd[r]; };
}

auto xhat_from_output(const float* y, const float* weight, const float* bias, int64_t C) {
  return [=](int64_t r, int64_t c) { return (y[r * C + c] - bias[c]) / weight[c]; };
}

// nn.LayerNorm's coefficient of xhat: mean(g * xhat).
auto mean_over(int64_t C) {
  return [C](int64_t, float sum_gx) { return sum_gx / C; };
}

// Seed 003's coefficient of xhat: sum(g * xhat) * (s + eps) / ((C - 1) s), with s + eps = 1 / rdenom;
// 0 for a constant row (s = 0), whose xhat is 0 anyway. In double: s may be tiny.
auto unbiased_std_term(const float* rdenom, const float* stddev, int64_t C) {
  return [=](int64_t r, float sum_gx) {
    if (!(stddev[r] > 0.f)) return 0.f;
    return static_cast<float>(sum_gx / (static_cast<double>(C - 1) * stddev[r] * rdenom[r]));
  };
}

// RMSNorm's forward body, with an addend as layernorm_forward_impl; rstd may be null. The sum of
// squares is layernorm's sum of squared deviations from 0, in double.
void rms_norm_forward_impl(float* y, float* rstd, const float* x, const float* addend, const float* weight,
                           int64_t rows, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = row_to_normalise(y, x, addend, r, C);
    float* yr = y + r * C;
    const float rs = standard_scale(squared_deviations_in_double(xr, C, 0.0), C, eps);
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * weight[c];  // T5's order: weight * (x * rstd)
    if (rstd) rstd[r] = rs;
  }
}
}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps) {
  layernorm_forward_impl(y, mean, rstd, x, nullptr, weight, bias, rows, C,
                         [=](int64_t, double sum_sq) { return standard_scale(sum_sq, C, eps); });
}

void add_layernorm_forward(float* y, const float* a, const float* b, const float* weight, const float* bias,
                           int64_t rows, int64_t C, float eps, bool unbiased) {
  if (unbiased)
    layernorm_forward_impl(y, nullptr, nullptr, a, b, weight, bias, rows, C,
                           [=](int64_t, double sum_sq) { return unbiased_scale(sum_sq, C, eps, nullptr); });
  else
    layernorm_forward_impl(y, nullptr, nullptr, a, b, weight, bias, rows, C,
                           [=](int64_t, double sum_sq) { return standard_scale(sum_sq, C, eps); });
}

void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* weight, int64_t rows, int64_t C,
                        bool accumulate_dx) {
  layernorm_backward_impl(dx, dweight, dbias, dy, rstd, weight, rows, C, accumulate_dx,
                          xhat_from_input(x, mean, rstd, C), mean_over(C));
}

void layernorm_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy, const float* y,
                                    const float* rstd, const float* weight, const float* bias, int64_t rows,
                                    int64_t C, bool accumulate_dx) {
  layernorm_backward_impl(dx, dweight, dbias, dy, rstd, weight, rows, C, accumulate_dx,
                          xhat_from_output(y, weight, bias, C), mean_over(C));
}

void layernorm_unbiased_forward(float* y, float* mean, float* rdenom, float* stddev, const float* x,
                                const float* weight, const float* bias, int64_t rows, int64_t C, float eps) {
  layernorm_forward_impl(y, mean, rdenom, x, nullptr, weight, bias, rows, C,
                         [=](int64_t r, double sum_sq) { return unbiased_scale(sum_sq, C, eps, stddev + r); });
}

void layernorm_unbiased_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                                 const float* mean, const float* rdenom, const float* stddev, const float* weight,
                                 int64_t rows, int64_t C, bool accumulate_dx) {
  layernorm_backward_impl(dx, dweight, dbias, dy, rdenom, weight, rows, C, accumulate_dx,
                          xhat_from_input(x, mean, rdenom, C), unbiased_std_term(rdenom, stddev, C));
}

void layernorm_unbiased_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy,
                                             const float* y, const float* rdenom, const float* stddev,
                                             const float* weight, const float* bias, int64_t rows, int64_t C,
                                             bool accumulate_dx) {
  layernorm_backward_impl(dx, dweight, dbias, dy, rdenom, weight, rows, C, accumulate_dx,
                          xhat_from_output(y, weight, bias, C), unbiased_std_term(rdenom, stddev, C));
}

void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, int64_t rows, int64_t C, float eps) {
  rms_norm_forward_impl(y, rstd, x, nullptr, weight, rows, C, eps);
}

void add_rms_norm_forward(float* y, const float* a, const float* b, const float* weight, int64_t rows, int64_t C,
                          float eps) {
  rms_norm_forward_impl(y, nullptr, a, b, weight, rows, C, eps);
}

void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* rstd,
                       const float* weight, int64_t rows, int64_t C, bool accumulate_dx) {
  const auto xhat_of = [=](int64_t r, int64_t c) { return x[r * C + c] * rstd[r]; };
  layernorm_backward_impl(dx, dweight, nullptr, dy, rstd, weight, rows, C, accumulate_dx, xhat_of, mean_over(C),
                          /*centred=*/false);
}

}  // namespace qkv::kernels
