// Log-probabilities of rows of logits for decoding: one row at a time, in place.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// log(sum_c exp(x_c)) as max + log(sum exp(x_c - max)): the exponentials on 8 AVX2 lanes
// (simd::exp, 1.2 ulp), their sum in double, so the result is as close as one float rounding of
// the double-precision normaliser. A row of -inf gives -inf.
float logsumexp_row(const float* x, int64_t C);

// x_c -= logsumexp(x) for every c, in place; returns the normaliser.
float log_softmax_row(float* x, int64_t C);

}  // namespace qkv::kernels
