// Softmax over the last dimension of a (rows, C) array.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// Numerically stable: subtracts the row max before exp.
void softmax_forward(float* y, const float* x, int64_t rows, int64_t C);
// One row in place, with AVX2 exp (1.2 ulp) and lane-wise sums. Training used std::exp here until
// 2026-11-25: its exp of masked entries (-1e9) went through libm's slow underflow path, and softmax
// took 3.5% of a GPT step's samples.
void softmax_row(float* row, int64_t C);
// y = softmax(x): dx_i = y_i * (dy_i - sum_j dy_j y_j).
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate);

}  // namespace qkv::kernels
