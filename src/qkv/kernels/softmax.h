// Softmax over the last dimension of a (rows, C) array.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// Numerically stable: subtracts the row max before exp.
void softmax_forward(float* y, const float* x, int64_t rows, int64_t C);
void softmax_row(float* row, int64_t C);  // in place, one row
// y = softmax(x): dx_i = y_i * (dy_i - sum_j dy_j y_j).
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate);

}  // namespace qkv::kernels
