// gemm_blocked (qkv's own SGEMM for training-sized products) against a double-precision loop, for
// every transpose combination and the shapes that exercise its tails: row tails of the 6-row tile
// (M 1, 5, 7, 13), column tails of the 16-wide panels (N 1, 15, 17, 40), K blocks (K 1, 7; 513 and
// 1025 cross the block lengths of a transposed and a plain A), padded strides, alpha and beta
// (beta 0 over a C of NaN must not leak). Then the properties training relies on: the bits do not
// depend on the thread count, nor a row's bits on how many rows share the product; and
// kernels::sgemm hands training-sized products to it.
//
// Tolerance: a sum of K products in float has error at most about K * 2^-24 * sum_k |a_k b_k|; we
// compare with 4 K eps sum |a b| (alpha applied), plus beta * C's own rounding.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <limits>
#include <random>
#include <vector>

#include "qkv/core/threads.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/gemm.h"

namespace qkv::kernels {
namespace {

struct BlockedCase {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
};

struct BlockedOperands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;
};

BlockedOperands make_blocked_operands(const BlockedCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  BlockedOperands o;
  // Stored shapes: A (M, K) or (K, M); B (K, N) or (N, K); row strides wider than the rows.
  o.lda = (c.ta ? c.M : c.K) + 3, o.ldb = (c.tb ? c.K : c.N) + 2, o.ldc = c.N + 5;
  o.A.resize((c.ta ? c.K : c.M) * o.lda), o.B.resize((c.tb ? c.N : c.K) * o.ldb), o.C.resize(c.M * o.ldc);
  for (float& x : o.A) x = u(rng);
  for (float& x : o.B) x = u(rng);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < o.ldc; ++j)  // the stride padding holds a sentinel that must survive
      o.C[i * o.ldc + j] = j >= c.N ? 12345.f : c.beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  return o;
}

void run(const BlockedCase& c, BlockedOperands& o) {
  gemm_blocked(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, o.C.data(), o.ldc);
}

void check_against_double(const BlockedCase& c) {
  BlockedOperands o = make_blocked_operands(c, static_cast<unsigned>(c.M * 131 + c.N * 17 + c.K * 3 + c.ta * 2 + c.tb));
  const std::vector<float> C0 = o.C;
  run(c, o);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(c.ta ? o.A[k * o.lda + i] : o.A[i * o.lda + k]) *
                         (c.tb ? o.B[j * o.ldb + k] : o.B[k * o.ldb + j]);
        sum += p, magnitude += std::fabs(p);
      }
      const double old = c.beta == 0.f ? 0.0 : c.beta * static_cast<double>(C0[i * o.ldc + j]);
      const double expected = c.alpha * sum + old;
      const double tolerance = 4 * c.K * eps * std::fabs(c.alpha) * magnitude + 2 * eps * std::fabs(old) + 1e-30;
      ASSERT_NEAR(o.C[i * o.ldc + j], expected, tolerance)
          << "ta " << c.ta << " tb " << c.tb << " M " << c.M << " N " << c.N << " K " << c.K << " alpha " << c.alpha
          << " beta " << c.beta << " at (" << i << ", " << j << ")";
    }
    for (int64_t j = c.N; j < o.ldc; ++j) ASSERT_EQ(o.C[i * o.ldc + j], 12345.f) << "padding of row " << i;
  }
}

TEST(BlockedGemm, MatchesDoublePrecisionForEveryTransposeAndTail) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      for (int64_t M : {1, 5, 7, 13})
        for (int64_t N : {1, 15, 17, 40}) check_against_double({ta, tb, M, N, 7, 1.f, 0.f});
      for (int64_t K : {1, 513, 1025}) check_against_double({ta, tb, 13, 33, K, 1.f, 0.f});
      check_against_double({ta, tb, 50, 40, 600, 0.5f, 0.f});
      check_against_double({ta, tb, 50, 40, 600, 1.f, 1.f});     // gradient accumulation
      check_against_double({ta, tb, 19, 21, 1100, -2.f, 0.5f});  // K blocks after the first add up
    }
}

// A transposed A whose last K block is shorter than the others (K 3200: blocks of 458, the last
// 452, as in the seed's micro-batches; 1025 and 5761 likewise) over enough rows that each thread's
// row block is full in that last block.
// Regression: the row block was sized by the current K block, so with K 3200 the last one packed
// 144 rows into scratch sized for 138 and overran it: wrong sums (in the other thread's packed B)
// and a write past the scratch (heap corruption), with 1 thread or 2.
TEST(BlockedGemm, ATransposedWithAShortLastKBlockStaysInItsScratch) {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t K : {1025, 3200, 5761}) check_against_double({true, false, 400, 40, K, 1.f, 0.f});
  }
  set_num_threads(saved);
}

TEST(BlockedGemm, KZeroScalesCByBeta) {
  BlockedOperands o = make_blocked_operands({false, false, 3, 4, 0, 1.f, 0.5f}, 1);
  const std::vector<float> C0 = o.C;
  run({false, false, 3, 4, 0, 1.f, 0.5f}, o);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(o.C[i * o.ldc + j], 0.5f * C0[i * o.ldc + j]);
  BlockedOperands z = make_blocked_operands({false, false, 3, 4, 0, 1.f, 0.f}, 2);  // NaN in C, beta 0: zeros
  run({false, false, 3, 4, 0, 1.f, 0.f}, z);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(z.C[i * z.ldc + j], 0.f);
}

// Threads split rows or panels, never K: one and two threads give the same bits. The shapes take
// each split: many panels; few panels (rows split); a transposed A (rows split, each thread packing
// its own).
TEST(BlockedGemm, BitsDoNotDependOnTheThreadCount) {
  const int saved = num_threads();
  for (const BlockedCase& c : {BlockedCase{false, true, 300, 200, 700, 1.f, 0.f}, BlockedCase{false, false, 300, 20, 1300, 1.f, 1.f},
                        BlockedCase{true, false, 200, 72, 900, 1.f, 0.f}, BlockedCase{true, true, 9, 300, 600, 1.f, 0.f}}) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      BlockedOperands o = make_blocked_operands(c, 7);
      run(c, o);
      results.push_back(o.C);
    }
    EXPECT_EQ(results[0], results[1]) << "ta " << c.ta << " tb " << c.tb << " M " << c.M << " N " << c.N;
  }
  set_num_threads(saved);
}

// A row's result does not depend on the rows around it (M, and so the row blocks and the tiles'
// heights: the last 7 to 9 rows go as 4 + 3, 4 + 4, 5 + 4, a transposed A's last tile is short):
// the first m rows of a 300-row product equal the m-row product of the same rows, bit for bit, for
// every m from 1 to 13.
TEST(BlockedGemm, ARowsBitsDoNotDependOnM) {
  for (bool ta : {false, true}) {
    const BlockedCase full{ta, false, 300, 40, 700, 1.f, 0.f};
    BlockedOperands big = make_blocked_operands(full, 3);
    run(full, big);
    for (int64_t m = 1; m <= 13; ++m) {
      const BlockedCase part{ta, false, m, 40, 700, 1.f, 0.f};
      BlockedOperands small = make_blocked_operands(part, 4);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < 700; ++k)
          (ta ? small.A[k * small.lda + i] : small.A[i * small.lda + k]) =
              ta ? big.A[k * big.lda + i] : big.A[i * big.lda + k];
      small.B = big.B;
      run(part, small);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < 40; ++j)
          ASSERT_EQ(small.C[i * small.ldc + j], big.C[i * big.ldc + j]) << "ta " << ta << " m " << m;
    }
  }
}

// A last panel of at most 8 columns runs the half-width tile (micro_tile.h: accumulate_low_half):
// its columns get the bits that the full tile gives them when the panel has more columns. N 36
// and 40 against N 48 on the same operands (B's extra columns appended), each transpose, alpha
// and beta, row tails, K blocks.
TEST(BlockedGemm, ANarrowLastPanelGivesTheBitsOfAFullOne) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t N : {36, 40})
        for (const BlockedCase& c : {BlockedCase{ta, tb, 13, N, 64, 1.f, 0.f}, BlockedCase{ta, tb, 7, N, 1100, 0.5f, 1.f}}) {
          const BlockedCase wide{c.ta, c.tb, c.M, 48, c.K, c.alpha, c.beta};
          BlockedOperands w = make_blocked_operands(wide, 9), n = make_blocked_operands(c, 10);
          // n's operands are w's, restricted to the first N columns of op(B) and of C
          for (int64_t i = 0; i < (c.ta ? c.K : c.M); ++i)
            for (int64_t k = 0; k < (c.ta ? c.M : c.K); ++k) n.A[i * n.lda + k] = w.A[i * w.lda + k];
          for (int64_t i = 0; i < (c.tb ? N : c.K); ++i)
            for (int64_t j = 0; j < (c.tb ? c.K : N); ++j) n.B[i * n.ldb + j] = w.B[i * w.ldb + j];
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < N; ++j) n.C[i * n.ldc + j] = w.C[i * w.ldc + j];
          run(wide, w);
          run(c, n);
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < N; ++j)
              ASSERT_EQ(n.C[i * n.ldc + j], w.C[i * w.ldc + j])
                  << "ta " << ta << " tb " << tb << " N " << N << " K " << c.K << " at (" << i << ", " << j << ")";
        }
}

// Random shapes, transposes, strides, beta and thread counts (a fixed seed), against OpenBLAS with
// the error bound above: sum |a b| comes from OpenBLAS on |A| and |B|. Shapes reach K 6000 and M
// 2000, where K's blocks, row blocks and panel blocks all have tails (the short-last-K-block
// overrun above was in none of the fixed cases).
TEST(BlockedGemm, AgreesWithOpenBlasOnRandomShapes) {
  const int saved = num_threads();
  std::mt19937 rng(2026);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int trial = 0; trial < 24; ++trial) {
    set_num_threads(1 + trial % 2);
    const bool ta = rng() % 2, tb = rng() % 2;
    const int64_t M = 1 + rng() % (trial % 3 == 0 ? 2000 : 400), N = 1 + rng() % 200, K = 1 + rng() % 6000;
    const BlockedCase c{ta, tb, M, N, K, 1.f, rng() % 2 ? 0.f : 0.5f};
    BlockedOperands o = make_blocked_operands(c, static_cast<unsigned>(trial));
    std::vector<float> expected = o.C, magnitude(o.C.size(), 0.f), abs_a(o.A), abs_b(o.B);
    for (float& x : abs_a) x = std::fabs(x);
    for (float& x : abs_b) x = std::fabs(x);
    const auto blas = [&](const std::vector<float>& a, const std::vector<float>& b, float beta, std::vector<float>& out) {
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                  static_cast<int>(N), static_cast<int>(K), 1.f, a.data(), static_cast<int>(o.lda), b.data(),
                  static_cast<int>(o.ldb), beta, out.data(), static_cast<int>(o.ldc));
    };
    blas(o.A, o.B, c.beta, expected);
    blas(abs_a, abs_b, 0.f, magnitude);
    run(c, o);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const int64_t at = i * o.ldc + j;
        const double tolerance = 8 * K * eps * magnitude[at] + 4 * eps * std::fabs(expected[at]) + 1e-30;
        ASSERT_NEAR(o.C[at], expected[at], tolerance) << "trial " << trial << ": ta " << ta << " tb " << tb << " M " << M
                                                      << " N " << N << " K " << K << " at (" << i << ", " << j << ")";
      }
  }
  set_num_threads(saved);
}

// kernels::sgemm passes products of training size (2^20 multiply-adds and up) to gemm_blocked.
TEST(BlockedGemm, SgemmUsesItForTrainingSizedProducts) {
  const BlockedCase c{true, false, 64, 130, 128, 1.f, 0.f};  // 1.06M multiply-adds
  BlockedOperands viaSgemm = make_blocked_operands(c, 5), direct = make_blocked_operands(c, 5);
  sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, viaSgemm.A.data(), viaSgemm.lda, viaSgemm.B.data(), viaSgemm.ldb, c.beta,
        viaSgemm.C.data(), viaSgemm.ldc);
  run(c, direct);
  EXPECT_EQ(viaSgemm.C, direct.C);
}

// A linear layer's forward, C = X W^T + bias: sgemm_plus_bias gives the bits of broadcasting the
// bias into C and multiplying with beta 1 (what the layer did before), both for a product that goes
// to gemm_blocked (the bias added as its first K block is stored: K 1100 has two) and for one
// that stays with OpenBLAS; a column tail (N 37) and a padded C included.
TEST(BlockedGemm, BiasAddedAsStoredGivesTheBitsOfBroadcastThenBetaOne) {
  for (const BlockedCase& c : {BlockedCase{false, true, 300, 37, 1100, 1.f, 0.f}, BlockedCase{false, true, 9, 37, 20, 1.f, 0.f}}) {
    BlockedOperands fused = make_blocked_operands(c, 8), broadcast = make_blocked_operands(c, 8);
    std::vector<float> bias(c.N);
    for (int64_t j = 0; j < c.N; ++j) bias[j] = 0.25f * static_cast<float>(j % 7) - 0.6f;
    sgemm_plus_bias(c.ta, c.tb, c.M, c.N, c.K, c.alpha, fused.A.data(), fused.lda, fused.B.data(), fused.ldb,
                    bias.data(), fused.C.data(), fused.ldc);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) broadcast.C[i * broadcast.ldc + j] = bias[j];
    sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, broadcast.A.data(), broadcast.lda, broadcast.B.data(), broadcast.ldb,
          1.f, broadcast.C.data(), broadcast.ldc);
    EXPECT_EQ(fused.C, broadcast.C) << "M " << c.M << " K " << c.K;  // the padding's sentinel too
  }
}

}  // namespace
}  // namespace qkv::kernels

namespace qkv::kernels {
namespace {

// The 6 x 32 tile (wide_tile.h: two panels at a time, 16-lane FMAs) gives gemm_blocked the bits of
// the 6 x 16 tile alone: each element is the same FMAs in the same order. On its model (the same
// code on 8-lane FMAs) on every CPU, and on AVX-512 where the CPU has it. Shapes: even and odd
// panel counts (a lone last panel), column tails in either panel of a pair, row tails, K blocks,
// each transpose, alpha, beta and bias, one and two threads (a thread's share of panels may be odd).
TEST(BlockedGemm, TheWideTileGivesTheBitsOfTheNarrowOne) {
  std::vector<std::pair<const char*, wide_tile::PairAccumulate>> tiles{{"model", wide_tile::model()}};
  if (wide_tile::avx512_or_null()) tiles.push_back({"avx512", wide_tile::avx512_or_null()});
  const int saved = num_threads();
  for (const auto& [name, tile] : tiles)
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (const BlockedCase& c : {BlockedCase{ta, tb, 13, 40, 7, 1.f, 0.f}, BlockedCase{ta, tb, 7, 64, 33, 1.f, 1.f},
                                BlockedCase{ta, tb, 50, 17, 600, 0.5f, 0.f}, BlockedCase{ta, tb, 19, 100, 1100, -2.f, 0.5f},
                                BlockedCase{ta, tb, 1, 31, 5, 1.f, 0.f}, BlockedCase{ta, tb, 300, 72, 513, 1.f, 0.f}}) {
            for (bool bias : {false, true}) {
              BlockedOperands narrow = make_blocked_operands(c, 3), wide = make_blocked_operands(c, 3);
              std::vector<float> b(static_cast<size_t>(c.N));
              for (int64_t j = 0; j < c.N; ++j) b[j] = 0.25f * static_cast<float>(j % 7) - 0.5f;
              gemm_blocked_with_tile(nullptr, c.ta, c.tb, c.M, c.N, c.K, c.alpha, narrow.A.data(), narrow.lda,
                                     narrow.B.data(), narrow.ldb, c.beta, narrow.C.data(), narrow.ldc,
                                     bias ? b.data() : nullptr);
              gemm_blocked_with_tile(tile, c.ta, c.tb, c.M, c.N, c.K, c.alpha, wide.A.data(), wide.lda, wide.B.data(),
                                     wide.ldb, c.beta, wide.C.data(), wide.ldc, bias ? b.data() : nullptr);
              ASSERT_EQ(std::memcmp(narrow.C.data(), wide.C.data(), narrow.C.size() * sizeof(float)), 0)
                  << name << ", " << threads << " threads: ta " << c.ta << " tb " << c.tb << " M " << c.M << " N "
                  << c.N << " K " << c.K << " bias " << bias;
            }
          }
    }
  set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::kernels
