// layernorm(a + b) fused for inference (fn::add_layernorm, ops::add_layernorm_forward): the bits of
// add then layernorm for both variants, serial and parallel row counts; recorded as those two ops
// (gradients reach a, b, weight and bias) when a gradient is being taken; shape errors named.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "qkv/autograd/functions.h"

namespace qkv {
namespace {

Tensor random_tensor(const Dims& shape, std::mt19937& gen, float scale) {
  std::normal_distribution<float> normal(0.3f, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(gen);
  return t;
}

TEST(AddLayerNorm, FusedGivesTheBitsOfAddThenLayerNorm) {
  std::mt19937 gen(21);
  for (const auto variant : {ops::LayerNormVariant::Standard, ops::LayerNormVariant::UnbiasedStd})
    for (const Dims& shape : {Dims{3, 5}, Dims{2, 7, 384}, Dims{64, 384}, Dims{1, 1, 2}}) {
      const int64_t C = shape[shape.size() - 1];
      const Tensor a = random_tensor(shape, gen, 2.f), b = random_tensor(shape, gen, 0.5f);
      const Tensor w = random_tensor(Dims{C}, gen, 1.f), bias = random_tensor(Dims{C}, gen, 1.f);
      const Tensor fused = ops::add_layernorm_forward(a, b, w, bias, 1e-12f, variant);
      const Tensor sum = fn::add(Var(a), Var(b)).value();
      const Tensor apart = ops::layernorm_forward(sum, w, bias, 1e-12f, variant).y;
      ASSERT_EQ(fused.shape(), apart.shape());
      for (int64_t i = 0; i < fused.numel(); ++i)
        ASSERT_EQ(fused.f32()[i], apart.f32()[i]) << "element " << i << " of " << shape;
    }
}

TEST(AddLayerNorm, RecordsAddAndLayerNormWhenTakingAGradient) {
  std::mt19937 gen(22);
  Var a(random_tensor(Dims{4, 6}, gen, 1.f), true), b(random_tensor(Dims{4, 6}, gen, 1.f), true);
  Var w(random_tensor(Dims{6}, gen, 1.f), true), bias(random_tensor(Dims{6}, gen, 1.f), true);
  const Var y = fn::add_layernorm(a, b, w, bias, 1e-5f);
  backward(y, Tensor::full(Dims{4, 6}, 1.f));
  ASSERT_TRUE(a.grad().defined() && b.grad().defined() && w.grad().defined() && bias.grad().defined());
  EXPECT_EQ(a.grad().to_vector(), b.grad().to_vector()) << "d(a + b)/da = d(a + b)/db";
  EXPECT_FLOAT_EQ(bias.grad().f32()[0], 4.f) << "dbias sums dy over the 4 rows";
}

TEST(AddLayerNorm, NamesAWrongWeightAndAOneValueUnbiasedRow) {
  const Tensor x = Tensor::full(Dims{2, 4}, 1.f), w3 = Tensor::full(Dims{3}, 1.f);
  EXPECT_THROW(
      {
        try {
          ops::add_layernorm_forward(x, x, w3, w3, 1e-5f);
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("add + layernorm: input (2, 4) needs weight and bias (4)"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      std::exception);
  const Tensor one = Tensor::full(Dims{2, 1}, 1.f), w1 = Tensor::full(Dims{1}, 1.f);
  EXPECT_THROW(
      {
        try {
          ops::add_layernorm_forward(one, one, w1, w1, 1e-5f, ops::LayerNormVariant::UnbiasedStd);
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("must be at least 2"), std::string::npos) << e.what();
          throw;
        }
      },
      std::exception);
}

TEST(AddLayerNorm, NamesMismatchedShapes) {
  const Tensor a = Tensor::full(Dims{2, 4}, 1.f), b = Tensor::full(Dims{2, 3}, 1.f), w = Tensor::full(Dims{4}, 1.f);
  EXPECT_THROW(
      {
        try {
          ops::add_layernorm_forward(a, b, w, w, 1e-5f);
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("(2, 3)"), std::string::npos) << e.what();
          throw;
        }
      },
      std::exception);
}

}  // namespace
}  // namespace qkv
