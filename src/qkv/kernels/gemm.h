// Row-major SGEMM through OpenBLAS: C = alpha * op(A) @ op(B) + beta * C.
// op(A) is (M, K), op(B) is (K, N), C is (M, N); ld* are row strides in elements.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C = alpha * op(A) @ op(B) + bias, the bias (N floats, or null) added to every row: a linear
// layer's forward. Products that sgemm gives to gemm_blocked add the bias as they store C; the
// others broadcast it into C first and multiply with beta 1. Same bits either way as the broadcast.
void sgemm_plus_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

}  // namespace qkv::kernels
