// LayerNorm over the last dimension C of a (rows, C) array.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y = (x - mean) * rstd * weight + bias; saves mean and rstd per row, (rows), for backward.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps);

// Inference's residual sub-layer end: y = layernorm(a + b) (seed 003's variant when unbiased), the
// sum formed in y's row and normalised there, in the same operations as add then layernorm_forward
// (the same bits), without a pass over memory for the sum or saved statistics.
void add_layernorm_forward(float* y, const float* a, const float* b, const float* weight, const float* bias,
                           int64_t rows, int64_t C, float eps, bool unbiased);

// With xhat = (x - mean) * rstd and g = dy * weight (per row):
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// (the two means come from differentiating through mean and rstd, both functions of the row).
//   dweight += sum_rows dy * xhat,  dbias += sum_rows dy.
// dx is written (or added to if accumulate_dx); dweight / dbias are always accumulated.
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* weight, int64_t rows, int64_t C,
                        bool accumulate_dx);

// The same gradients computed from the forward *output* y instead of the input x, with
// xhat = (y - bias) / weight: the input can then be freed (in a post-LN block nothing else needs
// it). Valid only when no |weight| is tiny; the op layer checks and otherwise saves x.
void layernorm_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy, const float* y,
                                    const float* rstd, const float* weight, const float* bias, int64_t rows,
                                    int64_t C, bool accumulate_dx);

// ---- seed 003's LayerNorm: y = weight * (x - mean) / (std + eps) + bias --------------------------
// std is the unbiased standard deviation (torch's x.std(-1), which divides by C - 1, so C >= 2),
// and eps is added to std, not to the variance. Saves per row the mean, rdenom = 1 / (std + eps)
// and std.
void layernorm_unbiased_forward(float* y, float* mean, float* rdenom, float* stddev, const float* x,
                                const float* weight, const float* bias, int64_t rows, int64_t C, float eps);

// Backward, per row, with xc = x - mean, s = std, d = s + eps, r = 1 / d, xhat = xc * r, g = dy * weight:
//   y_c = weight_c * xhat_c + bias_c, so dL/dx_j = sum_c g_c * d(xhat_c)/dx_j, and
//   d(xhat_c)/dx_j = r * (delta_cj - 1/C) - xc_c * r^2 * ds/dx_j            (quotient rule)
//   ds/dx_j = d/dx_j sqrt(sum_c xc_c^2 / (C - 1)) = sum_c xc_c (delta_cj - 1/C) / ((C - 1) s)
//           = xc_j / ((C - 1) s)                                              (sum_c xc_c = 0)
//   dx_j = r * (g_j - mean(g)) - r^2 * sum_c(g_c xc_c) * xc_j / ((C - 1) s)
//        = r * (g_j - mean(g) - xhat_j * sum_c(g_c xhat_c) * d / ((C - 1) s))   (xc = xhat * d)
// which is the standard form above with mean(g * xhat) replaced by sum(g * xhat) * d / ((C - 1) s).
// A constant row (s = 0) has xhat = 0: its last term is 0, as torch's std backward masks s = 0.
//   dweight += sum_rows dy * xhat,  dbias += sum_rows dy.
void layernorm_unbiased_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                                 const float* mean, const float* rdenom, const float* stddev, const float* weight,
                                 int64_t rows, int64_t C, bool accumulate_dx);

// The same from the output, xhat = (y - bias) / weight (see layernorm_backward_from_output).
void layernorm_unbiased_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy,
                                             const float* y, const float* rdenom, const float* stddev,
                                             const float* weight, const float* bias, int64_t rows, int64_t C,
                                             bool accumulate_dx);

// ---- T5's RMSNorm (T5LayerNorm): y = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) ------
// No mean subtraction and no bias. Saves rstd per row, (rows), for backward.
void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, int64_t rows, int64_t C, float eps);

// Inference: y = rms_norm(a + b), the sum formed in y's row (the bits of add then rms_norm_forward).
void add_rms_norm_forward(float* y, const float* a, const float* b, const float* weight, int64_t rows, int64_t C,
                          float eps);

// Backward, per row, with xhat = x * rstd and g = dy * weight:
//   y_c = weight_c * x_c * r with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C and
//   dx_j = sum_c g_c (r delta_cj + x_c dr/dx_j) = r g_j - r^3 x_j sum_c(g_c x_c) / C
//        = rstd * (g_j - xhat_j * mean(g * xhat))
// (layernorm_backward's form without the mean(g) term: there is no mean to differentiate through).
//   dweight += sum_rows dy * xhat.
// dx is written (or added to if accumulate_dx); dweight is always accumulated.
void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* rstd,
                       const float* weight, int64_t rows, int64_t C, bool accumulate_dx);

}  // namespace qkv::kernels
