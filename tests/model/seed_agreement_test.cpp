// qkv against seed 000's PyTorch model (tests/python/make_model_refs.py): same weights, same batch
// with padding, dropout 0 -> same logits, loss, every gradient, and every parameter after 10 Adam steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/ref_dir.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

// max |a - b| / max |b|: a relative error that is meaningful when some reference values are ~0.
double max_rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return diff / scale;
}

// The bias of W_k gets a gradient that is exactly zero in exact arithmetic: adding q . b_k shifts
// every score of a softmax row by the same amount, which softmax ignores. Both implementations
// hold only float32 rounding noise there (~1e-9), so a relative comparison is meaningless; we
// check instead that both are noise-sized, and, after 10 Adam steps (which normalise that noise
// into steps of size ~lr), that the two stay within the 2 * 10 * lr such noise can move them.
bool is_key_bias(const std::string& name) { return name.find("W_k.bias") != std::string::npos; }

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// Logits at decoder positions whose *target* is padding are compared too: the seed's query mask
// makes them a uniform average over all positions, which qkv reproduces.
TEST(SeedAgreement, LogitsLossGradientsAndTenAdamSteps) {
  const std::string model_dir = testing::ref_path("model_small");
  const std::string batch_path = testing::ref_path("model_small_batch.safetensors");
  if (model_dir.empty() || batch_path.empty()) return;
  auto model = models::load_model(model_dir);
  model->train();  // dropout is 0 in this config: training mode must then be deterministic
  io::TensorFile ref = io::load_tensors(batch_path);
  const Tensor src = ref.take("src"), tgt = ref.take("tgt");

  // Forward: logits and loss.
  const data::TeacherForcing tf = data::shift_target(tgt);
  {
    NoGradGuard no_grad;
    const Var logits = model->forward(src, tf.input);
    const double err = max_rel_error(logits.value(), ref.take("logits"));
    EXPECT_LE(err, 1e-4) << "logits";
    RecordProperty("logits_max_rel_error", std::to_string(err));
  }
  // Forward + backward: loss and every parameter's gradient.
  train::Adam opt(model->named_parameters());
  opt.zero_grad();
  const train::StepResult r = train::forward_backward(*model, src, tgt);
  const float ref_loss = ref.take("loss").item();
  EXPECT_LE(std::fabs(r.loss - ref_loss) / std::fabs(ref_loss), 1e-5) << r.loss << " vs " << ref_loss;
  double worst_grad = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const Tensor want = ref.take("grad." + name);
    if (is_key_bias(name)) {
      EXPECT_LE(max_abs(p.grad()), 1e-6) << name << " should be zero up to rounding";
      EXPECT_LE(max_abs(want), 1e-6) << name << " (PyTorch) should be zero up to rounding";
      continue;
    }
    const double err = max_rel_error(p.grad(), want);
    worst_grad = std::max(worst_grad, err);
    EXPECT_LE(err, 1e-4) << "grad." << name;
  }
  std::printf("worst gradient relative error %.3g\n", worst_grad);
  // Ten seed training steps (the first reuses the gradient above).
  const Tensor losses = ref.take("losses");
  opt.step();
  for (int step = 1; step < 10; ++step) {
    const train::StepResult s = train::train_step(*model, opt, src, tgt);
    EXPECT_NEAR(s.loss, losses.f32()[step], 1e-5 * std::fabs(losses.f32()[step])) << "step " << step + 1;
  }
  double worst_param = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    const Tensor want = ref.take("after10." + name);
    if (is_key_bias(name)) {
      const std::vector<float> a = p.value().to_vector(), b = want.to_vector();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(std::fabs(a[i] - b[i]), 2 * 10 * 1e-4) << name << "[" << i << "]";
      continue;
    }
    const double err = max_rel_error(p.value(), want);
    worst_param = std::max(worst_param, err);
    EXPECT_LE(err, 1e-4) << "after10." << name;
  }
  std::printf("worst parameter relative error after 10 Adam steps %.3g\n", worst_param);
}

TEST(SeedAgreement, ScoreMatchesPyTorch) {
  const std::string dir = testing::ref_path("model_small_score");
  const std::string model_dir = testing::ref_path("model_small");
  if (dir.empty() || model_dir.empty()) return;
  auto model = models::load_model(model_dir);
  model->eval();
  const auto src = data::read_id_lines(dir + "/src.txt", model->config().src_vocab_size);
  const auto tgt = data::read_id_lines(dir + "/tgt.txt", model->config().tgt_vocab_size);
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  for (int64_t batch : {1, 2, 5}) {  // batching with padding must not change any per-line score
    const train::ScoreResult r = train::score(*model, src, tgt, batch);
    EXPECT_NEAR(r.mean_loss(), expected["mean_loss"].get<double>(), 1e-5 * expected["mean_loss"].get<double>());
    ASSERT_EQ(r.line_log_prob.size(), expected["per_line"].size());
    for (size_t i = 0; i < r.line_log_prob.size(); ++i) {
      const double want = expected["per_line"][i].get<double>();
      EXPECT_NEAR(r.line_log_prob[i], want, 1e-5 * std::fabs(want) + 1e-5) << "line " << i + 1 << " batch " << batch;
    }
  }
}

}  // namespace
}  // namespace qkv
