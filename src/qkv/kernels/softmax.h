// Softmax over the last dimension of a (rows, C) array.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// Numerically stable: subtracts the row max before exp.
void softmax_forward(float* y, const float* x, int64_t rows, int64_t C);
void softmax_row(float* row, int64_t C);  // in place, one row
// The same with AVX2 exp (1.2 ulp) and lane-wise sums, rounded differently (attention's softmax in
// an embedding run: 4.0% of the profile with softmax_row and libm's expf, 1.3% with this). For
// inference only: training keeps softmax_row, whose numbers checkpoints were trained with.
void softmax_row_vectorized(float* row, int64_t C);
// y = softmax(x): dx_i = y_i * (dy_i - sum_j dy_j y_j).
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate);

}  // namespace qkv::kernels
