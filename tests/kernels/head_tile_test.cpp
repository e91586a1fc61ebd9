// head_tile.h: attention heads' products with B read in place on AVX-512 must give gemm_blocked's
// bits, element for element, since a head may take either (QKV_ISA, the shape): every row count
// of the 6-row tile (M 1 to 13, 24, 80), column tails of the 16-lane vectors (N 1, 8, 15, 16, 17,
// 40, 64), K 1 to 512 (one K block of gemm_blocked's, for either A), A plain or transposed, padded
// strides, alpha 1 and not, beta 0 (over a C of NaN, which must not leak) and 1. Skipped where the
// CPU (or QKV_ISA) has no AVX-512.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/head_tile.h"
#include "qkv/kernels/isa.h"

namespace qkv::kernels {
namespace {

struct HeadCase {
  bool trans_a;
  int64_t M, N, K;
  float alpha, beta;
};

std::vector<float> uniform_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

TEST(HeadTile, GivesGemmBlockedsBitsOnEveryTailAndTranspose) {
  const head_tile::Product in_place = head_tile::avx512_or_null();
  if (!in_place) GTEST_SKIP() << "no AVX-512 build here: " << isa_description();
  std::vector<HeadCase> cases;
  for (bool ta : {false, true})
    for (int64_t M : {1, 2, 5, 6, 7, 13, 24, 80})
      for (int64_t N : {1, 8, 15, 16, 17, 40, 64})
        for (int64_t K : {1, 7, 36, 512})
          cases.push_back({ta, M, N, K, (M + N) % 3 ? 1.f : 0.5f, K % 2 ? 0.f : 1.f});
  std::mt19937 rng(11);
  for (const HeadCase& c : cases) {
    // Padded strides, as a head's rows sit in a (B, T, H, dk) tensor.
    const int64_t lda = (c.trans_a ? c.M : c.K) + 3, ldb = c.N + 5, ldc = c.N + 2;
    const std::vector<float> A = uniform_floats((c.trans_a ? c.K : c.M) * lda, rng);
    const std::vector<float> B = uniform_floats(c.K * ldb, rng);
    std::vector<float> expected = c.beta != 0.f ? uniform_floats(c.M * ldc, rng)
                                                : std::vector<float>(static_cast<size_t>(c.M * ldc),
                                                                     std::numeric_limits<float>::quiet_NaN());
    std::vector<float> got = expected;
    gemm_blocked(c.trans_a, false, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, expected.data(), ldc);
    in_place(c.trans_a, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, got.data(), ldc);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const float e = expected[i * ldc + j], g = got[i * ldc + j];
        // Bits, NaN included (the padding past N stays as it was: NaN or the old C).
        ASSERT_EQ(std::memcmp(&e, &g, sizeof e), 0)
            << "trans_a " << c.trans_a << " M " << c.M << " N " << c.N << " K " << c.K << " alpha " << c.alpha
            << " beta " << c.beta << " at (" << i << ", " << j << "): " << g << " vs gemm_blocked's " << e;
      }
  }
}

}  // namespace
}  // namespace qkv::kernels
