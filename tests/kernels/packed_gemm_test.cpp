// gemm_packed against a double-precision loop over the shapes that exercise its tails: every row
// tail of the 6-row micro-kernel (M 1..13), rows of decoding (64, 128), column tails of the 16-wide
// panels (out 1, 15, 17, 40), one-element and long sums, padded strides, with and without bias; and
// products of many rows, which run in row blocks sized to the L2 cache (block tails included).
//
// Tolerance: each output is a float sum of K products accumulated by FMA in some order; its error is
// at most about K * 2^-24 * sum_k |a_k w_k| (first-order bound for recursive summation), so we compare
// to that scale rather than to |C| (which cancellation can make tiny): |C - ref| <= 4 K eps sum|a w|,
// plus the bias' own rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "qkv/core/cpu_features.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/kernels/wide_tile.h"

namespace qkv::kernels {
namespace {

struct PackedCase {
  int64_t M, out, in;
  bool bias;
};

void check(const PackedCase& c) {
  std::mt19937 rng(static_cast<unsigned>(c.M * 1009 + c.out * 31 + c.in * 7 + c.bias));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t lda = c.in + 5, ldc = c.out + 3;  // strides wider than the rows
  std::vector<float> A(c.M * lda), W(c.out * c.in), bias(c.out);
  for (float& x : A) x = u(rng);
  for (float& x : W) x = u(rng);
  for (float& x : bias) x = u(rng);
  const float sentinel = 12345.f;  // must survive in the stride padding of C
  std::vector<float> C(c.M * ldc, sentinel);
  const PackedWeights packed = pack_weights(W.data(), c.out, c.in);
  gemm_packed(A.data(), c.M, lda, packed, c.bias ? bias.data() : nullptr, C.data(), ldc);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.out; ++j) {
      double ref = c.bias ? bias[j] : 0.0, scale = std::abs(ref);
      for (int64_t k = 0; k < c.in; ++k) {
        const double p = static_cast<double>(A[i * lda + k]) * W[j * c.in + k];
        ref += p;
        scale += std::abs(p);
      }
      ASSERT_NEAR(C[i * ldc + j], ref, 4 * (c.in + 1) * eps * scale + 1e-30)
          << "M " << c.M << " out " << c.out << " in " << c.in << " bias " << c.bias << " at (" << i << ", " << j << ")";
    }
    for (int64_t j = c.out; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], sentinel) << "wrote past the row";
  }
}

TEST(PackedGemm, MatchesDoublePrecisionOnEveryTail) {
  std::vector<int64_t> Ms;
  for (int64_t m = 1; m <= 13; ++m) Ms.push_back(m);
  Ms.push_back(64);
  Ms.push_back(128);
  for (int64_t M : Ms)
    for (int64_t out : {1, 15, 16, 17, 40, 256})
      for (int64_t in : {1, 7, 64, 256})
        for (bool bias : {false, true}) check({M, out, in, bias});
}

// Encoder batches: hundreds of rows, split into row blocks of 256 KB of A (42 rows at in = 1536,
// 170 at in = 384), with a partial last block and a one-row tail.
TEST(PackedGemm, MatchesDoublePrecisionAcrossRowBlocks) {
  for (const PackedCase& c : {PackedCase{301, 40, 1536, true}, PackedCase{343, 17, 384, false}, PackedCase{1000, 33, 384, true}}) check(c);
}

TEST(PackedGemm, PackKeepsEveryWeightAndZeroPadsTheLastPanel) {
  const int64_t out = 19, in = 3;
  std::vector<float> W(out * in);
  for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>(i + 1);
  PackedWeights p = pack_weights(W.data(), out, in);
  ASSERT_EQ(p.panels(), 2);
  for (int64_t o = 0; o < 2 * PackedWeights::kPanel; ++o)
    for (int64_t k = 0; k < in; ++k) {
      const float got = p.panel(o / 16)[k * 16 + o % 16];
      EXPECT_EQ(got, o < out ? W[o * in + k] : 0.f) << o << " " << k;
    }
}

// A row alone (the one-row kernel of batch-1 decoding) gives the same bits as the same row inside a
// tile of any height (2 rows; 7 = 4 + 3, 8 = 4 + 4, 9 = 5 + 4, 11 = 6 + 5, 13 = 6 + 4 + 3), or of a
// product of several row blocks (in = 1536: blocks of 42 rows): generation and embeddings must not
// depend on how many rows share a product.
TEST(PackedGemm, ARowAloneGivesTheBitsOfTheSameRowInABlock) {
  for (const auto& [M, in] : {std::pair<int64_t, int64_t>{2, 200}, {7, 200}, {8, 200}, {9, 200}, {11, 200}, {13, 200},
                              {100, 1536}}) {
    const int64_t out = 45;
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> A(M * in), W(out * in), bias(out);
    for (float& x : A) x = g(rng);
    for (float& x : W) x = g(rng);
    for (float& x : bias) x = g(rng);
    const PackedWeights packed = pack_weights(W.data(), out, in);
    std::vector<float> block(M * out), alone(out);
    gemm_packed(A.data(), M, in, packed, bias.data(), block.data(), out);
    for (int64_t i = 0; i < M; ++i) {
      gemm_packed(A.data() + i * in, 1, in, packed, bias.data(), alone.data(), out);
      for (int64_t j = 0; j < out; ++j)
        ASSERT_EQ(alone[j], block[i * out + j]) << M << " rows: row " << i << " column " << j;
    }
  }
}

// The decoder's output layer at a beam-search step: same numbers as OpenBLAS up to float rounding.
TEST(PackedGemm, AgreesWithSgemmOnADecoderShape) {
  const int64_t M = 128, in = 256, out = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> A(M * in), W(out * in), bias(out), C(M * out), ref(M * out);
  for (float& x : A) x = g(rng);
  for (float& x : W) x = g(rng) * 0.06f;
  for (float& x : bias) x = g(rng);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < out; ++j) ref[i * out + j] = bias[j];
  sgemm(false, true, M, out, in, 1.f, A.data(), in, W.data(), in, 1.f, ref.data(), out);
  gemm_packed(A.data(), M, in, pack_weights(W.data(), out, in), bias.data(), C.data(), out);
  // Relative to the row's scale (max |ref|): single outputs near zero have no relative accuracy.
  for (int64_t i = 0; i < M; ++i) {
    float row_max = 0.f;
    for (int64_t j = 0; j < out; ++j) row_max = std::max(row_max, std::abs(ref[i * out + j]));
    for (int64_t j = 0; j < out; ++j) ASSERT_NEAR(C[i * out + j], ref[i * out + j], 1e-5f * row_max) << i << " " << j;
  }
}

}  // namespace
}  // namespace qkv::kernels

namespace qkv::kernels {
namespace {

// The 6 x 32 tile (wide_tile.h) gives gemm_packed the bits of the 6 x 16 tile alone, on its model
// everywhere and on AVX-512 where the CPU has it: every row count's tile heights (1 to 13, and the
// blocks of 64 and 128), even and odd panel counts with column tails in either panel of a pair,
// bias or not, strided A and C, one and two threads, and rows in more than one row block.
TEST(PackedGemm, TheWideTileGivesTheBitsOfTheNarrowOne) {
  std::vector<std::pair<const char*, wide_tile::PairAccumulate>> tiles{{"model", wide_tile::model()}};
  if (wide_tile::avx512_or_null()) tiles.push_back({"avx512", wide_tile::avx512_or_null()});
  const int saved = num_threads();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const auto& [name, tile] : tiles)
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 64, 128, 700})
        for (int64_t out : {1, 16, 17, 31, 32, 33, 48, 80})
          for (int64_t in : {1, 7, 100}) {
            if (M == 700 && in != 100) continue;  // several row blocks of K = 100 only
            const int64_t lda = in + 5, ldc = out + 3;
            std::vector<float> A(static_cast<size_t>(M * lda)), W(static_cast<size_t>(out * in)), bias(out);
            for (float& x : A) x = u(rng);
            for (float& x : W) x = u(rng);
            for (float& x : bias) x = u(rng);
            const PackedWeights packed = pack_weights(W.data(), out, in);
            for (bool with_bias : {false, true}) {
              std::vector<float> narrow(static_cast<size_t>(M * ldc), 7.f), wide = narrow;
              const float* b = with_bias ? bias.data() : nullptr;
              gemm_packed_with_tile(nullptr, A.data(), M, lda, packed, b, narrow.data(), ldc);
              gemm_packed_with_tile(tile, A.data(), M, lda, packed, b, wide.data(), ldc);
              ASSERT_EQ(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)), 0)
                  << name << ", " << threads << " threads: M " << M << " out " << out << " in " << in << " bias "
                  << with_bias;
            }
          }
    }
  set_num_threads(saved);
}

// gemm_packed and gemm_blocked use the tile wide_tile.h chooses: the 6 x 32 one on Intel with AVX-512
// (or as QKV_FLOAT32_TILE says), else none.
TEST(PackedGemm, TheChosenTileFollowsTheCpu) {
  if (std::getenv("QKV_FLOAT32_TILE")) GTEST_SKIP() << "QKV_FLOAT32_TILE is set";
  EXPECT_EQ(wide_tile::chosen_or_null(), cpu_features().intel ? wide_tile::avx512_or_null() : nullptr);
}

}  // namespace
}  // namespace qkv::kernels
