// kernels::sgemm against a double-precision loop for every transpose combination, including the
// one-row case that goes through sgemv (uninitialised NaN output with beta 0 must not leak).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "qkv/kernels/gemm.h"

namespace qkv::kernels {
namespace {

void check(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta) {
  std::mt19937 rng(static_cast<unsigned>(M * 131 + N * 17 + K + ta * 2 + tb));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Stored shapes: A (M, K) or (K, M); B (K, N) or (N, K); padded row strides.
  const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
  std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  for (float& x : C) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  const std::vector<float> C0 = C;
  sgemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      const double expected = 0.5 * sum + (beta == 0.f ? 0.0 : beta * C0[i * ldc + j]);
      ASSERT_NEAR(C[i * ldc + j], expected, 1e-4) << "ta " << ta << " tb " << tb << " M " << M << " (" << i << ", " << j << ")";
    }
}

TEST(Sgemm, OneRowAndManyRowsMatchDoublePrecisionForEveryTranspose) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 2, 7})
        for (float beta : {0.f, 1.f}) check(ta, tb, M, 33, 65, beta);
}

}  // namespace
}  // namespace qkv::kernels
