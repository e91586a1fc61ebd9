// kernels/product_clock.h, the benchmarks' "matrix products' share of the step": it counts nothing
// while disabled; enabled, it counts a product's time once (gemm_bf16's widened build calls
// gemm_blocked inside it), never more than the wall time around the calls, and products made by a
// team of threads at once (attention's heads) as 1/T each, so that the count still estimates wall
// time.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <string>
#include <vector>

#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/product_clock.h"

namespace qkv::kernels {
namespace {

constexpr int64_t kN = 256;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ProductClock, CountsEachProductOnceOnlyWhenEnabledAndWithinTheWallTime) {
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  const auto product = [&] {
    gemm_blocked(false, false, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
  };

  product_clock::set_enabled(false);
  product_clock::reset();
  product();
  EXPECT_EQ(product_clock::seconds(), 0.0) << "disabled, the clock counts nothing";

  product_clock::set_enabled(true);
  product_clock::reset();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    product();
    gemm_bf16(false, false, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);  // nests on some builds
  }
  double wall = seconds_since(t0);
  EXPECT_GT(product_clock::seconds(), 0.5 * wall) << "nearly all of that loop is products";
  EXPECT_LE(product_clock::seconds(), wall) << "a nested product counted twice";

  // A team of threads, each multiplying its own head, as attention does: 1/T of each product.
  product_clock::reset();
  t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(2)
  {
    std::vector<float> own(kN * kN);
    for (int i = 0; i < 3; ++i)
      gemm_blocked(false, false, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, own.data(), kN);
  }
  wall = seconds_since(t0);
  EXPECT_GT(product_clock::seconds(), 0.0);
  EXPECT_LE(product_clock::seconds(), 1.02 * wall) << "each thread's products counted whole";
  product_clock::set_enabled(false);
  product_clock::reset();
}

// By shape: each distinct product (type, transposes, M x N x K) gets its own calls and time, a
// nested product counts as its outer one, and the totals add up to the clock's seconds.
TEST(ProductClock, ByShapeKeepsEachDistinctProductsCallsAndTime) {
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  product_clock::set_enabled(true, /*by_shape=*/true);
  product_clock::reset();
  for (int i = 0; i < 3; ++i) gemm_blocked(false, true, kN, kN / 2, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
  for (int i = 0; i < 2; ++i) gemm_blocked(true, false, kN / 4, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
  gemm_bf16(false, false, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);  // nests on some builds
  const std::vector<product_clock::ShapeTotal> totals = product_clock::by_shape();
  ASSERT_EQ(totals.size(), 3u) << "three distinct products; a nested one is its outer one's";
  double sum = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    sum += totals[i].seconds;
    if (i > 0) {
      EXPECT_GE(totals[i - 1].seconds, totals[i].seconds) << "the most time first";
    }
  }
  EXPECT_NEAR(sum, product_clock::seconds(), 1e-6);
  const auto find = [&](const char* type, bool ta, bool tb, int64_t M, int64_t N) {
    for (const auto& t : totals) {
      if (std::string(t.shape.type) == type && t.shape.trans_a == ta && t.shape.trans_b == tb && t.shape.M == M &&
          t.shape.N == N && t.shape.K == kN)
        return t;
    }
    ADD_FAILURE() << type << " " << M << " x " << N << " not found";
    return product_clock::ShapeTotal{};
  };
  EXPECT_EQ(find("f32", false, true, kN, kN / 2).calls, 3);
  EXPECT_EQ(find("f32", true, false, kN / 4, kN).calls, 2);
  const product_clock::ShapeTotal bf16 = find("bf16", false, false, kN, kN);
  EXPECT_EQ(bf16.calls, 1);
  EXPECT_DOUBLE_EQ(bf16.flops(), 2.0 * kN * kN * kN);

  product_clock::reset();
  EXPECT_TRUE(product_clock::by_shape().empty());
  product_clock::set_enabled(true);  // not by shape: the total only
  gemm_blocked(false, false, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
  EXPECT_GT(product_clock::seconds(), 0.0);
  EXPECT_TRUE(product_clock::by_shape().empty());
  product_clock::set_enabled(false);
  product_clock::reset();
}

}  // namespace
}  // namespace qkv::kernels
