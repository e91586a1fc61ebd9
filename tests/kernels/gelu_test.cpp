// The vectorised GELU kernels (exact and tanh, forward and backward) against double precision over
// a dense sweep of floats; bit-identical results whatever the length, offset or thread count; the
// backward kernels' accumulate flag.
//
// Bounds. Forward: 4 ulp of the result everywhere (the kernels never form 1 + erf or 1 + tanh, so
// the negative tail keeps full relative accuracy; measured 2.9 exact, 3.6 tanh). Backward: in ulps of
// |term 1| + |term 2| (exact GELU: Phi(x) and |x phi(x)|; tanh GELU: 0.5 (1 + t) and
// |0.5 x (1 - t^2) du|), 4 for exact GELU (measured 2.9) and 6 for tanh GELU (measured 5.1: its
// negative branch e d (1 + w d) carries d = 1 / (1 + e) twice and exp's ulp). The derivative crosses
// zero near x = -0.75, where the terms cancel and no bound relative to the result can hold; away
// from the crossing the sum of the terms is within a small factor of the result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "kernels/float_sweep.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/gelu_isa.h"

namespace qkv::kernels {
namespace {

using testing::random_inputs;
using testing::sweep;
using testing::ulp_error;

// The references in double, written without cancellation: Phi(x) = erfc(-x / sqrt 2) / 2, and for
// tanh GELU 1 + tanh u = 2 / (1 + exp(-2u)), 1 - tanh^2 u = 4 e / (1 + e)^2 with e = exp(-2|u|).
struct Ref {
  double value, term1, term2;  // value = term1 + term2 (the forward has term2 = 0)
};
constexpr double kPi = 3.14159265358979323846;

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * kPi); }

Ref gelu_ref(double x) { return {x * normal_cdf(x), x * normal_cdf(x), 0}; }
Ref gelu_grad_ref(double x) { return {normal_cdf(x) + x * normal_pdf(x), normal_cdf(x), x * normal_pdf(x)}; }

double tanh_u(double x) { return std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x); }
double one_plus_tanh(double u) { return 2 / (1 + std::exp(-2 * u)); }
Ref gelu_tanh_ref(double x) {
  const double y = 0.5 * x * one_plus_tanh(tanh_u(x));
  return {y, y, 0};
}
Ref gelu_tanh_grad_ref(double x) {
  const double u = tanh_u(x), e = std::exp(-2 * std::abs(u));
  const double t1 = 0.5 * one_plus_tanh(u);
  const double t2 = 0.5 * x * (4 * e / ((1 + e) * (1 + e))) * std::sqrt(2 / kPi) * (1 + 3 * 0.044715 * x * x);
  return {t1 + t2, t1, t2};
}

// Limits at infinity (the double formulas give inf * 0 there).
Ref at_infinity(double x, bool grad) {
  if (grad) return {x > 0 ? 1.0 : 0.0, 1, 0};
  return {x > 0 ? x : 0.0, 1, 0};
}

using Forward = void (*)(float*, const float*, int64_t);
using Backward = void (*)(float*, const float*, const float*, int64_t, bool);

std::vector<float> run_forward(Forward f, const std::vector<float>& xs) {
  std::vector<float> y(xs.size());
  f(y.data(), xs.data(), static_cast<int64_t>(xs.size()));
  return y;
}
std::vector<float> run_backward(Backward f, const std::vector<float>& xs) {
  std::vector<float> dy(xs.size(), 1.f), dx(xs.size());
  f(dx.data(), dy.data(), xs.data(), static_cast<int64_t>(xs.size()), false);
  return dx;
}

// Max over xs of the error in ulps of |term1| + |term2|; printed with where it happens.
double max_ulp(const char* name, const std::vector<float>& xs, const std::vector<float>& got,
               const std::function<Ref(double)>& ref, bool grad) {
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Ref r = std::isinf(xs[i]) ? at_infinity(xs[i], grad) : ref(xs[i]);
    const double e = ulp_error(got[i], r.value, std::abs(r.term1) + std::abs(r.term2));
    if (!(e <= worst)) worst = e, at = xs[i];
  }
  std::printf("%s: max error %.3f ulp at x = %.9g (%zu inputs)\n", name, worst, at, xs.size());
  return worst;
}

constexpr double kForwardBound = 4.0, kExactBackwardBound = 4.0, kTanhBackwardBound = 6.0;
constexpr double kFloatStepsBound = 3e-5;  // relative; bf16's step is 3.9e-3 (FloatStepsForBf16...)

TEST(GeluKernel, ExactForwardMatchesDoublePrecision) {
  const std::vector<float> xs = sweep(16.f);
  EXPECT_LE(max_ulp("gelu", xs, run_forward(gelu_forward, xs), gelu_ref, false), kForwardBound);
}

TEST(GeluKernel, ExactBackwardMatchesDoublePrecision) {
  const std::vector<float> xs = sweep(16.f);
  EXPECT_LE(max_ulp("gelu'", xs, run_backward(gelu_backward, xs), gelu_grad_ref, true), kExactBackwardBound);
}

// The form for values quantized next (an int8 feed-forward): within 1.2e-7 max(1, |x|) of
// gelu_forward (measured over all 2^32 inputs: 1.19e-7 at x = 0.952), and the same infinities and NaN.
TEST(GeluKernel, FormToQuantizeIsWithinItsBoundOfGelu) {
  std::vector<float> xs = sweep(16.f);
  for (float v : {0.952169f, 4.01377f, -0.7072f, 0.7072f, -11.3861f, -14.9f, -15.1f}) xs.push_back(v);
  const std::vector<float> exact = run_forward(gelu_forward, xs), fast = run_forward(gelu_forward_to_quantize, xs);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(exact[i]) || std::isinf(exact[i])) {
      EXPECT_TRUE(std::isnan(exact[i]) ? std::isnan(fast[i]) : fast[i] == exact[i]) << "x = " << xs[i];
      continue;
    }
    worst = std::max(worst, std::abs(double(fast[i]) - exact[i]) / std::max(1.0, std::abs(double(xs[i]))));
  }
  std::printf("gelu_forward_to_quantize: max |difference| / max(1, |x|) %.3g (%zu inputs)\n", worst, xs.size());
  EXPECT_LE(worst, 1.2e-7);
  EXPECT_GT(worst, 0.0);  // it is a different computation: a zero would mean the exact kernel ran
}

TEST(GeluKernel, TanhForwardMatchesDoublePrecision) {
  const std::vector<float> xs = sweep(16.f);
  EXPECT_LE(max_ulp("gelu_tanh", xs, run_forward(gelu_tanh_forward, xs), gelu_tanh_ref, false), kForwardBound);
}

TEST(GeluKernel, TanhBackwardMatchesDoublePrecision) {
  const std::vector<float> xs = sweep(16.f);
  EXPECT_LE(max_ulp("gelu_tanh'", xs, run_backward(gelu_tanh_backward, xs), gelu_tanh_grad_ref, true), kTanhBackwardBound);
}

// The float-step forms for bf16 precision (kernels/gelu_lanes.h) against the kernels good to a few
// ulps, over the dense sweep and the points where u's rounding weighs most (large |u| for x < 0):
// relative to max(|exact|, floor); the same infinities and NaN. The forward's floor is 1e-30 (its
// values' own size); the derivative's is 0.25, the size of its two terms where they cancel at its
// root (x = -0.7525: 0.5 (1 + t) = -0.5 x (1 - t^2) du = 0.23). bf16's rounding step is 2^-8
// relative: the bound is a hundred times below it.
double worst_relative_gap(const char* name, const std::vector<float>& xs, const std::vector<float>& exact,
                          const std::vector<float>& fast, double floor) {
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(exact[i]) || std::isinf(exact[i])) {
      EXPECT_TRUE(std::isnan(exact[i]) ? std::isnan(fast[i]) : fast[i] == exact[i]) << name << " at x = " << xs[i];
      continue;
    }
    const double gap = std::abs(double(fast[i]) - exact[i]) / std::max(floor, std::abs(double(exact[i])));
    if (gap > worst) worst = gap, at = xs[i];
  }
  std::printf("%s: max relative gap %.3g at x = %.9g (%zu inputs)\n", name, worst, at, xs.size());
  return worst;
}

TEST(GeluKernel, FloatStepsForBf16AreWithinTheirBound) {
  std::vector<float> xs = sweep(24.f);
  for (float v : {-8.3f, -9.f, -12.5f, -15.f, -19.99f, -0.75f, 0.75f, -3.f, 3.f}) xs.push_back(v);
  const double forward = worst_relative_gap("gelu_tanh for bf16", xs, run_forward(gelu_tanh_forward, xs),
                                            run_forward(gelu_tanh_forward_for_bf16, xs), 1e-30);
  const double backward = worst_relative_gap("gelu_tanh' for bf16", xs, run_backward(gelu_tanh_backward, xs),
                                             run_backward(gelu_tanh_backward_for_bf16, xs), 0.25);
  // Away from the root, the derivative relative to its own size too (its tail for x < 0 is tiny).
  std::vector<float> tails;
  for (float v : xs)
    if (!(std::abs(v) < 2.f)) tails.push_back(v);
  const double backward_tails =
      worst_relative_gap("gelu_tanh' for bf16, |x| >= 2", tails, run_backward(gelu_tanh_backward, tails),
                         run_backward(gelu_tanh_backward_for_bf16, tails), 1e-30);
  // The exact GELU's derivative likewise (its forward's float form: FormToQuantizeIsWithinItsBoundOfGelu).
  const double erf_backward = worst_relative_gap("gelu' for bf16", xs, run_backward(gelu_backward, xs),
                                                 run_backward(gelu_backward_for_bf16, xs), 0.25);
  const double erf_backward_tails =
      worst_relative_gap("gelu' for bf16, |x| >= 2", tails, run_backward(gelu_backward, tails),
                         run_backward(gelu_backward_for_bf16, tails), 1e-30);
  EXPECT_LE(forward, kFloatStepsBound);
  EXPECT_LE(backward, kFloatStepsBound);
  EXPECT_LE(backward_tails, kFloatStepsBound);
  EXPECT_LE(erf_backward, kFloatStepsBound);
  EXPECT_LE(erf_backward_tails, kFloatStepsBound);
  EXPECT_GT(forward, 0.0);  // a different computation: zero would mean the accurate kernel ran
}

TEST(GeluKernel, SpecialValues) {
  const float inf = INFINITY;
  const auto fwd = [](Forward f, float x) { return run_forward(f, {x})[0]; };
  const auto bwd = [](Backward f, float x) { return run_backward(f, {x})[0]; };
  for (Forward f : {gelu_forward, gelu_tanh_forward}) {
    EXPECT_EQ(fwd(f, inf), inf);
    EXPECT_EQ(fwd(f, -inf), 0.f);  // the limit, not -inf * 0 = NaN
    EXPECT_EQ(fwd(f, -1e30f), 0.f);
    EXPECT_EQ(fwd(f, 1e30f), 1e30f);
    EXPECT_TRUE(std::signbit(fwd(f, -0.f)) && fwd(f, -0.f) == 0.f);
    EXPECT_TRUE(std::isnan(fwd(f, NAN)));
  }
  for (Backward f : {gelu_backward, gelu_tanh_backward}) {
    EXPECT_EQ(bwd(f, inf), 1.f);
    EXPECT_EQ(bwd(f, -inf), 0.f);
    EXPECT_EQ(bwd(f, 0.f), 0.5f);
    EXPECT_EQ(bwd(f, 1e-40f), 0.5f);
    EXPECT_TRUE(std::isnan(bwd(f, NAN)));
  }
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Every slice [offset, offset + n) of an array gives the bits that the whole array gives there: the
// 8-lane blocks and the padded tail compute each value identically.
TEST(GeluKernel, SameBitsForEveryLengthAndOffset) {
  const std::vector<float> x = random_inputs(64, 1), dy = random_inputs(64, 2), dx0 = random_inputs(64, 3);
  for (Forward f : {gelu_forward, gelu_tanh_forward}) {
    const std::vector<float> whole = run_forward(f, x);
    for (int64_t n = 1; n <= 40; ++n)
      for (int64_t off = 0; off + n <= 64 && off < 24; ++off) {
        std::vector<float> y(n);
        f(y.data(), x.data() + off, n);
        ASSERT_TRUE(same_bits(y.data(), whole.data() + off, n)) << "n " << n << " offset " << off;
      }
  }
  for (Backward f : {gelu_backward, gelu_tanh_backward})
    for (bool acc : {false, true}) {
      std::vector<float> whole = dx0;
      f(whole.data(), dy.data(), x.data(), 64, acc);
      for (int64_t n = 1; n <= 40; ++n)
        for (int64_t off = 0; off + n <= 64 && off < 24; ++off) {
          std::vector<float> dx(dx0.begin() + off, dx0.begin() + off + n);
          f(dx.data(), dy.data() + off, x.data() + off, n, acc);
          ASSERT_TRUE(same_bits(dx.data(), whole.data() + off, n)) << "n " << n << " offset " << off << " acc " << acc;
        }
    }
}

// Large enough to run in parallel; one and two threads give the same bits.
TEST(GeluKernel, SameBitsForOneAndTwoThreads) {
  const size_t n = 100003;
  const std::vector<float> x = random_inputs(n, 4), dy = random_inputs(n, 5);
  const int saved = num_threads();
  std::vector<std::vector<float>> out[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (Forward f : {gelu_forward, gelu_tanh_forward}) out[threads - 1].push_back(run_forward(f, x));
    for (Backward f : {gelu_backward, gelu_tanh_backward}) {
      std::vector<float> dx(n);
      f(dx.data(), dy.data(), x.data(), n, false);
      out[threads - 1].push_back(dx);
    }
  }
  set_num_threads(saved);
  for (size_t k = 0; k < out[0].size(); ++k) EXPECT_TRUE(same_bits(out[0][k].data(), out[1][k].data(), n)) << k;
}

// accumulate adds dy * gelu'(x) to dx: the same bits as dx + (the overwritten result).
TEST(GeluKernel, BackwardAccumulateAddsToDx) {
  const size_t n = 37;
  const std::vector<float> x = random_inputs(n, 6), dy = random_inputs(n, 7), dx0 = random_inputs(n, 8);
  for (Backward f : {gelu_backward, gelu_tanh_backward}) {
    std::vector<float> g(n), acc = dx0;
    f(g.data(), dy.data(), x.data(), n, false);
    f(acc.data(), dy.data(), x.data(), n, true);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(acc[i], dx0[i] + g[i]) << i;
  }
}

// The AVX-512F build of the four kernels gives the AVX2 build's bits on the dense sweep, special
// values and the backward accumulate, so which one a CPU picks never shows in the numbers.
TEST(GeluKernel, Avx512BuildGivesTheSameBits) {
  const gelu_isa::Kernels* wide = gelu_isa::avx512_or_null();
  const gelu_isa::Kernels& narrow = gelu_isa::avx2();
  if (!wide) {
    // The path this CPU has is the AVX2 build (the sweeps above check it against double); the
    // AVX-512F build is named, not skipped silently, so a log says which builds went unchecked.
    EXPECT_EQ(gelu_isa::chosen().forward, narrow.forward);
    std::printf("gelu: AVX-512F build not checked (this CPU has no AVX-512F); AVX2 build chosen and checked\n");
    ::testing::Test::RecordProperty("unchecked_isa_builds", "avx512f");
    return;
  }
  std::vector<float> x = sweep(16.f);  // special values included
  for (float v : {-0.75f, 0.7072f, -0.7072f}) x.push_back(v);
  const std::vector<float> dy = random_inputs(x.size(), 9), dx0 = random_inputs(x.size(), 10);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::pair<Forward, Forward> forwards[] = {{narrow.forward, wide->forward},
                                                  {narrow.forward_to_quantize, wide->forward_to_quantize},
                                                  {narrow.tanh_forward, wide->tanh_forward},
                                                  {narrow.tanh_forward_for_bf16, wide->tanh_forward_for_bf16}};
  for (const auto& [a, b] : forwards) EXPECT_TRUE(same_bits(run_forward(a, x).data(), run_forward(b, x).data(), x.size()));
  const std::pair<Backward, Backward> backwards[] = {{narrow.backward, wide->backward},
                                                     {narrow.tanh_backward, wide->tanh_backward},
                                                     {narrow.backward_for_bf16, wide->backward_for_bf16},
                                                     {narrow.tanh_backward_for_bf16, wide->tanh_backward_for_bf16}};
  for (const auto& [a, b] : backwards)
    for (bool acc : {false, true}) {
      std::vector<float> da = dx0, db = dx0;
      a(da.data(), dy.data(), x.data(), n, acc);
      b(db.data(), dy.data(), x.data(), n, acc);
      EXPECT_TRUE(same_bits(da.data(), db.data(), x.size())) << "accumulate " << acc;
    }
  EXPECT_EQ(gelu_isa::chosen().forward, wide->forward);
}

}  // namespace
}  // namespace qkv::kernels
