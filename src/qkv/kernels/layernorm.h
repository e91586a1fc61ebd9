// LayerNorm over the last dimension C of a (rows, C) array.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y = (x - mean) * rstd * weight + bias; saves mean and rstd per row, (rows), for backward.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps);

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

}  // namespace qkv::kernels
