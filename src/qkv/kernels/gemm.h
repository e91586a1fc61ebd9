// Row-major SGEMM through OpenBLAS: C = alpha * op(A) @ op(B) + beta * C.
// op(A) is (M, K), op(B) is (K, N), C is (M, N); ld* are row strides in elements.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace qkv::kernels
