// T5's RMSNorm (ops::LayerNormVariant::RMS): nn::LayerNorm holds only a weight; the fused add gives
// the bits of add then RMSNorm; forward and backward against a double-precision reference on a
// shape that takes the threaded paths, the same bits on 1 and 2 threads; a bias is refused by name.
// (PyTorch agreement: OpReference rms_norm_*; finite differences: Gradcheck.RmsNorm*.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "error_message.h"
#include "qkv/autograd/functions.h"
#include "qkv/core/threads.h"
#include "qkv/nn/layers.h"

namespace qkv {
namespace {

constexpr ops::LayerNormVariant kRms = ops::LayerNormVariant::RMS;

Tensor random_tensor(const Dims& shape, std::mt19937& gen, float mean, float scale) {
  std::normal_distribution<float> normal(mean, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(gen);
  return t;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.f32()[i], want.f32()[i]) << what << ", element " << i;
}

TEST(RmsNorm, LayerNormModuleRegistersOnlyAWeightOfOnes) {
  nn::LayerNorm ln(6, 1e-6f, kRms);
  const auto params = ln.named_parameters();
  ASSERT_EQ(params.size(), 1u) << "a T5 checkpoint has no bias tensor";
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second.value().to_vector(), std::vector<float>(6, 1.f));
  EXPECT_FALSE(ln.bias.defined());
}

TEST(RmsNorm, LayerNormModuleNormalisesAndGivesGradientsToXAndWeight) {
  std::mt19937 gen(31);
  nn::LayerNorm ln(6, 1e-6f, kRms);
  Var x(random_tensor(Dims{4, 6}, gen, 2.f, 1.f), true);
  const Var y = ln.forward(x);
  for (int64_t r = 0; r < 4; ++r) {  // weight 1: every row has mean(y^2) = 1 (up to eps)
    double ms = 0;
    for (int64_t c = 0; c < 6; ++c) ms += std::pow(y.value().f32()[r * 6 + c], 2) / 6;
    EXPECT_NEAR(ms, 1.0, 1e-5) << "row " << r;
  }
  backward(y, random_tensor(Dims{4, 6}, gen, 0.f, 1.f));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(ln.weight.grad().defined());
}

TEST(RmsNorm, FusedAddGivesTheBitsOfAddThenRmsNorm) {
  std::mt19937 gen(32);
  for (const Dims& shape : {Dims{3, 5}, Dims{2, 7, 384}, Dims{64, 384}, Dims{1, 1, 1}}) {
    const int64_t C = shape[shape.size() - 1];
    const Tensor a = random_tensor(shape, gen, 0.3f, 2.f), b = random_tensor(shape, gen, 0.3f, 0.5f);
    const Tensor w = random_tensor(Dims{C}, gen, 1.f, 0.5f);
    const Tensor fused = ops::add_layernorm_forward(a, b, w, Tensor(), 1e-6f, kRms);
    const Tensor sum = fn::add(Var(a), Var(b)).value();
    expect_same_bits(fused, ops::layernorm_forward(sum, w, Tensor(), 1e-6f, kRms).y, "add_layernorm_forward");
    NoGradGuard no_grad;
    expect_same_bits(fn::add_layernorm(Var(a), Var(b), Var(w), Var(), 1e-6f, kRms).value(), fused,
                     "fn::add_layernorm");
  }
}

struct Reference {
  std::vector<double> y, dx, dweight;
};

// y = w x r, dx = r (g - xhat mean(g xhat)), dweight = sum_rows dy xhat, all in double.
Reference reference(const Tensor& x, const Tensor& w, const Tensor& dy, double eps) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  Reference ref{std::vector<double>(x.numel()), std::vector<double>(x.numel()), std::vector<double>(C)};
  const float *xp = x.f32(), *wp = w.f32(), *dyp = dy.f32();
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0, sum_gx = 0;
    for (int64_t c = 0; c < C; ++c) ms += double(xp[r * C + c]) * xp[r * C + c] / C;
    const double rs = 1.0 / std::sqrt(ms + eps);
    for (int64_t c = 0; c < C; ++c) sum_gx += double(dyp[r * C + c]) * wp[c] * xp[r * C + c] * rs;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const double xhat = xp[i] * rs;
      ref.y[i] = wp[c] * xhat;
      ref.dx[i] = rs * (double(dyp[i]) * wp[c] - xhat * sum_gx / C);
      ref.dweight[c] += dyp[i] * xhat;
    }
  }
  return ref;
}

void expect_near(const Tensor& got, const std::vector<double>& want, double atol, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.f32()[i], want[i], atol + 1e-5 * std::fabs(want[i])) << what << ", element " << i;
}

// 64 x 384 > 16384 elements: the kernels' OpenMP loops run, dweight summed in column blocks.
TEST(RmsNorm, MatchesADoublePrecisionReferenceOnOneAndTwoThreads) {
  std::mt19937 gen(33);
  const Dims shape{64, 384};
  const Tensor x = random_tensor(shape, gen, 0.5f, 1.5f), dy = random_tensor(shape, gen, 0.f, 1.f);
  const Tensor w = random_tensor(Dims{384}, gen, 1.f, 0.5f);
  const Reference ref = reference(x, w, dy, 1e-6);
  const int threads = num_threads();
  std::vector<Tensor> results;
  for (int n : {1, 2}) {
    set_num_threads(n);
    const ops::LayerNormOut out = ops::layernorm_forward(x, w, Tensor(), 1e-6f, kRms);
    EXPECT_FALSE(out.mean.defined());
    Tensor dx, dweight = Tensor::full(Dims{384}, 0.5f), dbias = Tensor::full(Dims{384}, 7.f);
    ops::layernorm_backward(dy, x, w, out, &dx, &dweight, &dbias);
    EXPECT_EQ(dbias.to_vector(), std::vector<float>(384, 7.f)) << "RMSNorm's backward leaves dbias alone";
    ops::layernorm_backward(dy, x, w, out, nullptr, nullptr, nullptr);  // nothing wanted: no crash
    results.insert(results.end(), {out.y, dx, dweight});
  }
  set_num_threads(threads);
  expect_near(results[0], ref.y, 1e-6, "y");
  expect_near(results[1], ref.dx, 1e-5, "dx");
  std::vector<double> dweight = ref.dweight;
  for (double& v : dweight) v += 0.5;  // accumulated into the slot's 0.5
  expect_near(results[2], dweight, 1e-4, "dweight");
  for (size_t i = 0; i < 3; ++i) expect_same_bits(results[3 + i], results[i], "2 threads vs 1");
}

TEST(RmsNorm, BackwardAddsIntoAFilledDxSlot) {
  std::mt19937 gen(34);
  const Tensor x = random_tensor(Dims{5, 7}, gen, 0.f, 1.f), dy = random_tensor(Dims{5, 7}, gen, 0.f, 1.f);
  const Tensor w = random_tensor(Dims{7}, gen, 1.f, 0.5f);
  const ops::LayerNormOut out = ops::layernorm_forward(x, w, Tensor(), 1e-6f, kRms);
  Tensor fresh, filled = Tensor::full(Dims{5, 7}, 1.f);
  ops::layernorm_backward(dy, x, w, out, &fresh, nullptr, nullptr);
  ops::layernorm_backward(dy, x, w, out, &filled, nullptr, nullptr);
  // To an ulp of the O(1) operands, not bits: the compiler may fuse the addition into the product.
  for (int64_t i = 0; i < fresh.numel(); ++i) EXPECT_NEAR(filled.f32()[i], 1.f + fresh.f32()[i], 1e-6f) << i;
}

TEST(RmsNorm, RefusesABiasNamingIt) {
  const Tensor x = Tensor::full(Dims{2, 4}, 1.f), w = Tensor::full(Dims{4}, 1.f);
  const std::string forward =
      test_support::error_message_of([&] { ops::layernorm_forward(x, w, w, 1e-6f, kRms); }, "no error");
  EXPECT_NE(forward.find("bias"), std::string::npos) << forward;
  const std::string fused =
      test_support::error_message_of([&] { ops::add_layernorm_forward(x, x, w, w, 1e-6f, kRms); }, "no error");
  EXPECT_NE(fused.find("bias"), std::string::npos) << fused;
  // The other variants still need their bias, and a bias-less norm never takes the from-output path.
  EXPECT_NE(test_support::error_message_of([&] { ops::layernorm_forward(x, w, Tensor(), 1e-5f); }, "no error")
                .find("needs weight and bias"),
            std::string::npos);
  EXPECT_FALSE(ops::layernorm_can_use_output(w, Tensor()));
  const std::string wrong_weight = test_support::error_message_of(
      [&] { ops::layernorm_forward(x, Tensor::full(Dims{3}, 1.f), Tensor(), 1e-6f, kRms); }, "no error");
  EXPECT_NE(wrong_weight.find("needs weight (4)"), std::string::npos) << wrong_weight;
}

}  // namespace
}  // namespace qkv
