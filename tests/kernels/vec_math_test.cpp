// The AVX2 exp, erf and tanh of kernels/vec_math.h against double precision over a dense sweep of
// floats, with the special values: saturation, signed zeros, subnormals, infinities, NaN.
#include "qkv/kernels/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>

#include "kernels/float_sweep.h"
#include "qkv/kernels/elementwise.h"

namespace qkv::kernels {
namespace {

using testing::sweep;
using testing::ulp_error;

// Applies an 8-lane function to every x (the last block padded with zeros).
using Lane = __m256 (*)(__m256);
std::vector<float> lanes(const std::vector<float>& xs, Lane f) {
  std::vector<float> in = xs, out(xs.size() + 8);
  in.resize(xs.size() + 8, 0.f);
  for (size_t i = 0; i < xs.size(); i += 8) _mm256_storeu_ps(&out[i], f(_mm256_loadu_ps(&in[i])));
  out.resize(xs.size());
  return out;
}

// The largest error in ulps over xs, and where; printed so that the margin to the bound is visible.
double max_ulp(const char* name, const std::vector<float>& xs, const std::vector<float>& got,
               const std::function<double(double)>& ref) {
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(xs[i]);
    const double e = ulp_error(got[i], want, want);
    if (!(e <= worst)) worst = e, at = xs[i];
  }
  std::printf("%s: max error %.3f ulp at x = %.9g (%zu inputs)\n", name, worst, at, xs.size());
  return worst;
}

TEST(VecMath, ExpWithinTwoUlpIncludingSubnormalResults) {
  const std::vector<float> xs = sweep(110.f);
  EXPECT_LE(max_ulp("exp", xs, lanes(xs, simd::exp), [](double x) { return std::exp(x); }),
            2.0);
}

// exp_or_zero skips the arithmetic of lanes whose exp rounds to zero: it must give exp's bits on
// the sweep (with -inf, NaN and huge negative scores such as a masked -1e9) and on every float of
// [-110, -98], around its cut at -104.
TEST(VecMath, ExpOrZeroGivesTheBitsOfExp) {
  std::vector<float> xs = sweep(1e30f);
  for (float x = -110.f; x <= -98.f; x = std::nextafter(x, 0.f)) xs.push_back(x);
  const std::vector<float> want = lanes(xs, simd::exp), got = lanes(xs, simd::exp_or_zero);
  int64_t skipped = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    skipped += xs[i] < -104.f;
    if (std::isnan(want[i])) ASSERT_TRUE(std::isnan(got[i])) << "x = " << xs[i];
    else ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "x = " << xs[i];
  }
  EXPECT_GT(skipped, 1000000);  // the lanes it skips were among the inputs
}

TEST(VecMath, ErfWithinTwoUlpAndSaturates) {
  const std::vector<float> xs = sweep(12.f);
  const std::vector<float> got = lanes(xs, simd::erf);
  EXPECT_LE(max_ulp("erf", xs, got, [](double x) { return std::erf(x); }), 2.0);
  const auto one = [](float x) { return lanes({x}, simd::erf)[0]; };
  EXPECT_EQ(one(4.f), 1.f);
  EXPECT_EQ(one(-1e30f), -1.f);
  EXPECT_EQ(one(INFINITY), 1.f);
  EXPECT_EQ(one(-INFINITY), -1.f);
  EXPECT_TRUE(std::signbit(one(-0.f)) && one(-0.f) == 0.f);
  EXPECT_EQ(one(1e-40f), std::erf(1e-40f));
  EXPECT_TRUE(std::isnan(one(NAN)));
}

TEST(VecMath, TanhWithinTwoUlpExactForTinyAndSaturates) {
  const std::vector<float> xs = sweep(12.f);
  const std::vector<float> got = lanes(xs, simd::tanh);
  EXPECT_LE(max_ulp("tanh", xs, got, [](double x) { return std::tanh(x); }), 2.0);
  const auto one = [](float x) { return lanes({x}, simd::tanh)[0]; };
  EXPECT_EQ(one(1e-20f), 1e-20f);  // tanh x = x - x^3/3: x is the correctly rounded result
  EXPECT_EQ(one(1e-40f), 1e-40f);
  EXPECT_TRUE(std::signbit(one(-0.f)) && one(-0.f) == 0.f);
  EXPECT_EQ(one(9.1f), 1.f);
  EXPECT_EQ(one(-1e30f), -1.f);
  EXPECT_EQ(one(INFINITY), 1.f);
  EXPECT_EQ(one(-INFINITY), -1.f);
  EXPECT_TRUE(std::isnan(one(NAN)));
}

// relu_forward (max(x, +0) on 8 lanes) gives the bits of x > 0 ? x : 0 on the sweep of floats, NaN
// and -0 included (both give +0), whatever the length's tail.
TEST(ReluKernel, GivesTheBitsOfTheScalarRule) {
  const std::vector<float> xs = sweep(16.f);
  for (size_t n : {xs.size(), xs.size() - 3, size_t{5}}) {
    std::vector<float> y(n, 7.f);
    relu_forward(y.data(), xs.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = xs[i] > 0.f ? xs[i] : 0.f;
      ASSERT_EQ(std::memcmp(&y[i], &want, sizeof(float)), 0) << "x = " << xs[i] << ", n = " << n;
    }
  }
}

}  // namespace
}  // namespace qkv::kernels
