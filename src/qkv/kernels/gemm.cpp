#include "qkv/kernels/gemm.h"

#include <cblas.h>

#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/product_clock.h"

namespace qkv::kernels {

namespace {
constexpr int64_t kBlockedMin = int64_t{1} << 20;  // multiply-adds
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const product_clock::Scope clock("f32", M, N, K, trans_a, trans_b);
  // BLAS leaves C untouched for K == 0 only when beta == 1; gemm_blocked scales C by beta, uniformly.
  if (K == 0) return gemm_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (M == 1) {
    // One row (decoding a single sequence): a matrix-vector product. OpenBLAS's sgemm would copy
    // and repack all of B for that one row, which made batch-1 generation spend 70% of its time
    // packing; sgemv streams B once. y (N) = alpha * op(B)^T a + beta * y, a = op(A)'s one row.
    // BLAS computes beta * y even when beta is 0, and C may be uninitialised (NaN * 0 = NaN):
    // zero it first.
    if (beta == 0.f)
      for (int64_t j = 0; j < N; ++j) C[j] = 0.f;
    const blasint inc_a = trans_a ? static_cast<blasint>(lda) : 1;  // op(A) (1, K): a row, or a column of A
    if (trans_b)  // B stored (N, K): y = B a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(N), static_cast<blasint>(K), alpha, B,
                  static_cast<blasint>(ldb), A, inc_a, beta, C, 1);
    else  // B stored (K, N): y = B^T a
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(K), static_cast<blasint>(N), alpha, B,
                  static_cast<blasint>(ldb), A, inc_a, beta, C, 1);
    return;
  }
  // Products of training size go through qkv's own blocked GEMM (kernels/blocked_gemm.h: 1.0-1.16x
  // OpenBLAS on qkv's shapes, bench_gemm); small ones, attention's per-head products among them,
  // stay with OpenBLAS's small-matrix kernels. The choice depends on the shape alone.
  if (M * N * K >= kBlockedMin)
    return gemm_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

void sgemm_plus_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  const product_clock::Scope clock("f32", M, N, K, trans_a, trans_b);
  if (!bias) return sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.f, C, ldc);
  if (M * N * K >= kBlockedMin)
    return gemm_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.f, C, ldc, bias);
  if (ldc == N)
    broadcast_rows(C, bias, M, N);
  else
    for (int64_t i = 0; i < M; ++i) broadcast_rows(C + i * ldc, bias, 1, N);
  sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 1.f, C, ldc);
}

}  // namespace qkv::kernels
