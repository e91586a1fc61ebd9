// qkv's bf16 precision (ops/precision.h: bf16 operands, float32 sums) against PyTorch's CPU autocast,
// torch.autocast("cpu", dtype=torch.bfloat16), from tests/python/make_bf16_refs.py.
//
// One linear layer, forward and backward, element by element. qkv and autocast round the same
// operands to bf16 (x, w, and the incoming gradient dy), and both sum in float32; they differ in
// that autocast also rounds the bias and each product's result to bf16 (8 significant bits: a
// rounding errs by up to 2^-8 relatively). So each element may differ by 2^-8 of its size (and of the
// bias, or of the sum of |dy| for the bias gradient), plus the float32 sums' rounding. The bound is
// tight: the worst elements come within a few percent of it.
//
// A whole GPT (make_gpt_refs.py's gpt_small), trained 10 AdamW steps: bf16 differs from float32 by
// far more than float32 implementations differ from each other, and the two bf16 implementations
// round in different places, so element-wise agreement with autocast is not the test. The test is
// that qkv's bf16 is at least as close to float32 as autocast's is (logits, loss, every gradient,
// every parameter after 10 steps: qkv's error at most 1.5x autocast's), and that it does differ from
// float32 (the bf16 path ran).
#include <gtest/gtest.h>

#include <cmath>

#include "model/agreement_checks.h"
#include "model/ref_dir.h"
#include "qkv/core/dtype.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/ops/ops.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

using testing::max_rel_error;

constexpr double kBf16Step = 1.0 / 256;  // 2^-8: bf16's largest relative rounding error
constexpr double kBf16Bound = kBf16Step * (1 + kBf16Step);  // of the rounded value instead of the exact one

TEST(Bf16Agreement, LinearForwardAndBackwardMatchAutocastToOneBf16Rounding) {
  const std::string path = testing::ref_path("linear_bf16.safetensors");
  if (path.empty()) return;
  io::TensorFile ref = io::load_tensors(path);
  const Tensor x = ref.take("x"), w = ref.take("w"), b = ref.take("b"), dy = ref.take("dy");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const Tensor y = ops::linear_forward(x, w, b, ops::Precision::BF16);
  Tensor dx, dw, db;
  ops::linear_backward(dy, x, w, &dx, &dw, &db, ops::Precision::BF16);
  const float eps = 4 * static_cast<float>(K) * 1.2e-7f;  // float32 sums of K terms of size ~1
  const auto expect_within = [](const char* what, const Tensor& ours, const Tensor& theirs, const auto& tolerance) {
    ASSERT_EQ(ours.shape(), theirs.shape()) << what;
    const std::vector<float> a = ours.to_vector(), t = theirs.to_vector();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double tol = tolerance(i);
      ASSERT_LE(std::fabs(a[i] - t[i]), tol) << what << " element " << i << ": qkv " << a[i] << ", autocast " << t[i];
      worst = std::max(worst, std::fabs(a[i] - t[i]) / tol);
    }
    std::printf("linear %s: worst difference %.2f of the tolerance\n", what, worst);
  };
  const std::vector<float> bv = b.to_vector(), dyv = dy.to_vector();
  const Tensor ac_y = ref.take("ac.y"), ac_dx = ref.take("ac.dx"), ac_dw = ref.take("ac.dw"), ac_db = ref.take("ac.db");
  const std::vector<float> acy = ac_y.to_vector(), acdx = ac_dx.to_vector(), acdw = ac_dw.to_vector(),
                           acdb = ac_db.to_vector();
  std::vector<double> dy_col_abs(N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) dy_col_abs[j] += std::fabs(dyv[i * N + j]);
  expect_within("y", y, ac_y, [&](size_t i) { return kBf16Bound * (std::fabs(acy[i]) + std::fabs(bv[i % N])) + eps; });
  expect_within("dx", dx, ac_dx, [&](size_t i) { return kBf16Bound * std::fabs(acdx[i]) + eps; });
  expect_within("dw", dw, ac_dw, [&](size_t i) { return kBf16Bound * std::fabs(acdw[i]) + eps * M / K; });
  expect_within("db", db, ac_db, [&](size_t j) { return kBf16Bound * (std::fabs(acdb[j]) + dy_col_abs[j]) + eps; });
  // And it is bf16 arithmetic: float32 products differ from it by far more than float32 sums' rounding.
  EXPECT_GT(max_rel_error(ops::linear_forward(x, w, b, ops::Precision::Float32), y), 1e-3);
}

struct Errors {
  double qkv = 0, autocast = 0;
  std::string worst;
};

void compare(Errors& e, const std::string& what, const Tensor& ours, const Tensor& autocast, const Tensor& f32) {
  const double q = max_rel_error(ours, f32), t = max_rel_error(autocast, f32);
  if (q / std::max(t, 1e-12) > e.qkv / std::max(e.autocast, 1e-12)) e.worst = what;
  e.qkv = std::max(e.qkv, q), e.autocast = std::max(e.autocast, t);
}

void expect_as_close_as_autocast(const char* what, const Errors& e) {
  std::printf("gpt bf16 %s: qkv's largest relative error from float32 %.3g, autocast's %.3g (worst ratio at %s)\n",
              what, e.qkv, e.autocast, e.worst.c_str());
  EXPECT_LE(e.qkv, 1.5 * e.autocast) << what << ": qkv's bf16 is further from float32 than autocast's";
  EXPECT_GT(e.qkv, 1e-4) << what << ": no bf16 rounding seen: did the products run in float32?";
}

TEST(Bf16Agreement, GptTrainsAsCloseToFloat32AsAutocastDoes) {
  const std::string model_dir = testing::ref_path("gpt_bf16");
  const std::string batch_path = testing::ref_path("gpt_bf16_batch.safetensors");
  if (model_dir.empty() || batch_path.empty()) return;
  auto model = models::load_causal_lm(model_dir);
  model->train(true);  // dropout 0
  io::TensorFile ref = io::load_tensors(batch_path);
  const Tensor ids = ref.take("ids");
  const ops::ProductPrecisionScope bf16(ops::Precision::BF16);

  Errors logits;
  {
    NoGradGuard no_grad;
    compare(logits, "logits", model->forward(data::shift_target(ids).input).value(), ref.take("ac.logits"),
            ref.take("f32.logits"));
  }
  expect_as_close_as_autocast("logits", logits);

  train::AdamOptions options;
  options.lr = 1e-3, options.beta1 = 0.9, options.beta2 = 0.95, options.eps = 1e-8;
  options.weight_decay = 0.1, options.decoupled_weight_decay = true;
  train::Adam opt(model->named_parameters(), options);
  opt.zero_grad();
  const train::StepResult r = train::forward_backward(*model, Tensor(), ids);
  const float loss32 = ref.take("f32.loss").item(), loss_ac = ref.take("ac.loss").item();
  std::printf("gpt bf16 loss: qkv %.6f, autocast %.6f, float32 %.6f\n", r.loss, loss_ac, loss32);
  EXPECT_NEAR(r.loss, loss32, kBf16Step * std::fabs(loss32)) << "the loss, within bf16's resolution of float32's";
  Errors grads;
  for (const auto& [param, p] : model->named_parameters()) {
    if (testing::is_key_bias(param)) continue;  // rounding noise (gpt_agreement_test.cpp)
    compare(grads, param, p.grad(), ref.take("ac.grad." + param), ref.take("f32.grad." + param));
  }
  expect_as_close_as_autocast("gradients", grads);

  opt.step();
  const Tensor losses32 = ref.take("f32.losses"), losses_ac = ref.take("ac.losses");
  float last = 0;
  for (int step = 1; step < 10; ++step) last = train::train_step(*model, opt, Tensor(), ids).loss;
  const float want = losses32.f32()[9], ac = losses_ac.f32()[9];
  std::printf("gpt bf16 loss after 10 steps: qkv %.6f, autocast %.6f, float32 %.6f\n", last, ac, want);
  EXPECT_NEAR(last, want, kBf16Step * std::fabs(want)) << "the 10th step's loss";
  Errors params;
  for (const auto& [param, p] : model->named_parameters()) {
    if (testing::is_key_bias(param)) continue;
    compare(params, param, p.value(), ref.take("ac.after10." + param), ref.take("f32.after10." + param));
  }
  expect_as_close_as_autocast("parameters after 10 AdamW steps", params);
}

}  // namespace
}  // namespace qkv
