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

// Hugging Face's get_linear_schedule_with_warmup / get_cosine_schedule_with_warmup, with qkv's steps
// counted from 1 (so the last step still has a rate above 0).
TEST(Schedule, LinearAndCosineWarmUpThenDecayToZeroAtTheLastStep) {
  const Schedule linear{"linear", 1e-3, 10, 0, 110};
  EXPECT_DOUBLE_EQ(linear.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(linear.at(10), 1e-3);
  EXPECT_NEAR(linear.at(11), 1e-3 * 100 / 101, 1e-18);
  EXPECT_NEAR(linear.at(60), 1e-3 * 51 / 101, 1e-18);
  EXPECT_NEAR(linear.at(110), 1e-3 / 101, 1e-18);
  EXPECT_DOUBLE_EQ(linear.at(111), 0);
  EXPECT_DOUBLE_EQ(linear.at(500), 0);  // past the end (a run resumed with more steps): stays at 0
  const Schedule cosine{"cosine", 1e-3, 10, 0, 110};
  EXPECT_DOUBLE_EQ(cosine.at(10), 1e-3);
  EXPECT_NEAR(cosine.at(60), 1e-3 * 0.5 * (1 + std::cos(M_PI * 50 / 101)), 1e-18);
  EXPECT_NEAR(cosine.at(110), 1e-3 * 0.5 * (1 + std::cos(M_PI * 100 / 101)), 1e-18);
  EXPECT_GT(cosine.at(110), 0);
  EXPECT_NEAR(cosine.at(111), 0, 1e-18);
  for (int64_t step = 11; step < 110; ++step) {
    EXPECT_LT(linear.at(step + 1), linear.at(step)) << step;
    EXPECT_LT(cosine.at(step + 1), cosine.at(step)) << step;
  }
}

TEST(Schedule, LinearAndCosineNeedTheirLastStepOncePastTheWarmUp) {
  for (const char* kind : {"linear", "cosine"}) {
    const Schedule unset{kind, 1e-3, 100, 0, 0};  // the Trainer sets it from the time budget
    EXPECT_DOUBLE_EQ(unset.at(50), 5e-4);
    EXPECT_DOUBLE_EQ(unset.at(100), 1e-3);
    try {
      unset.at(101);
      ADD_FAILURE() << kind << " past its warm-up without a last step was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("last step is not set (step 101 is past the warm-up)"), std::string::npos)
          << e.what();
    }
    try {
      Schedule{kind, 1e-3, 100, 0, 100}.at(1);
      ADD_FAILURE() << kind << " ending at its warm-up was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("give --steps greater than --warmup (steps 100, warm-up 100)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_NO_THROW((Schedule{kind, 1e-3, 100, 0, 101}.at(101)));
  }
}

// 800 warm-up steps took 1920 s (2.4 s a step); 4980 s of a 6900 s budget are left: 0.99 * 4980 / 2.4
// = 2054.25 more steps.
TEST(Schedule, StepsThatFitABudgetFollowThePaceSoFar) {
  EXPECT_EQ(steps_that_fit(800, 1920.0, 6900.0, 800), 800 + 2054);
  EXPECT_EQ(steps_that_fit(800, 7000.0, 6900.0, 800), 801);  // budget already used: decay at once
  EXPECT_EQ(steps_that_fit(10, 0.0, 60.0, 10), 11);  // no pace measured (no clock): one step of decay
}

TEST(Schedule, ConstantAndErrors) {
  EXPECT_DOUBLE_EQ((Schedule{"constant", 3e-4, 0, 0}.at(12345)), 3e-4);
  EXPECT_THROW((Schedule{"exponential", 1e-3, 10, 0}.at(1)), Error);
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
