#include <gtest/gtest.h>

#include <cmath>

#include "qkv/train/clip.h"
#include "qkv/train/schedule.h"

namespace qkv::train {
namespace {

TEST(Schedule, NoamMatchesThePaperFormula) {
  Schedule s{"noam", 1.0, 4000, 512};
  for (int64_t step : {1, 10, 1000, 3999, 4000, 4001, 100000}) {
    const double want = std::pow(512.0, -0.5) * std::min(std::pow(step, -0.5), step * std::pow(4000.0, -1.5));
    EXPECT_DOUBLE_EQ(s.at(step), want) << step;
  }
  // Peak at the end of warm-up: d^-0.5 * w^-0.5.
  EXPECT_NEAR(s.at(4000), 1.0 / std::sqrt(512.0 * 4000.0), 1e-12);
  EXPECT_LT(s.at(3000), s.at(4000));
  EXPECT_LT(s.at(8000), s.at(4000));
}

TEST(Schedule, InverseSqrtWarmsUpLinearlyThenDecays) {
  Schedule s{"inverse_sqrt", 5e-4, 100, 0};
  EXPECT_DOUBLE_EQ(s.at(50), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.at(100), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(400), 2.5e-4);  // sqrt(100 / 400) = 1/2
}

TEST(Schedule, ConstantAndErrors) {
  EXPECT_DOUBLE_EQ((Schedule{"constant", 3e-4, 0, 0}.at(12345)), 3e-4);
  EXPECT_THROW((Schedule{"cosine", 1e-3, 10, 0}.at(1)), Error);
  EXPECT_THROW((Schedule{"noam", 1.0, 10, 512}.at(0)), Error);
  EXPECT_THROW((Schedule{"inverse_sqrt", 1e-3, 0, 0}.at(1)), Error);
}

TEST(ClipGradNorm, ScalesAllGradientsByOneFactor) {
  Var a(Tensor::zeros(Dims{2}), true), b(Tensor::zeros(Dims{1}), true), c(Tensor::zeros(Dims{3}), true);
  *a.grad_slot() = Tensor::from_vector(Dims{2}, {3.f, 0.f});
  *b.grad_slot() = Tensor::from_vector(Dims{1}, {4.f});  // total norm 5; c has no gradient
  EXPECT_NEAR(clip_grad_norm({a, b, c}, 0.0), 5.0, 1e-12);  // measure only
  EXPECT_NEAR(clip_grad_norm({a, b, c}, 1.0), 5.0, 1e-12);
  EXPECT_NEAR(a.grad().to_vector()[0], 3.f / (5.f + 1e-6f), 1e-6);
  EXPECT_NEAR(b.grad().to_vector()[0], 4.f / (5.f + 1e-6f), 1e-6);
  EXPECT_NEAR(clip_grad_norm({a, b, c}, 10.0), 1.0, 1e-5);  // below max: unchanged
  EXPECT_NEAR(b.grad().to_vector()[0], 0.8f, 1e-5);
}

}  // namespace
}  // namespace qkv::train
