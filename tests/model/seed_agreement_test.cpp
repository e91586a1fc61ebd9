// qkv against seed 000's PyTorch model (tests/python/make_model_refs.py): same weights, same batch
// with padding, dropout 0 -> same logits, loss, every gradient, and every parameter after 10 Adam steps.
// The same for a model with the options of seed 003 and GPT-2 (tests/python/seed_variants.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/agreement_checks.h"
#include "model/ref_dir.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

using testing::max_abs;
using testing::max_rel_error;

// One reference model (make_model_refs.py): <name>/ holds the checkpoint, <name>_batch.safetensors
// the batch, PyTorch's logits, loss, gradients and parameters after 10 Adam steps, computed in
// training mode (dropout 0) or in eval mode (a config with dropout, which eval turns off).
// Logits at decoder positions whose *target* is padding are compared too: the seed's query mask
// makes them a uniform average over all positions, which qkv reproduces.
void expect_agreement(const std::string& name, bool train_mode) {
  const std::string model_dir = testing::ref_path(name);
  const std::string batch_path = testing::ref_path(name + "_batch.safetensors");
  if (model_dir.empty() || batch_path.empty()) return;
  auto model = models::load_seq2seq(model_dir);
  model->train(train_mode);
  io::TensorFile ref = io::load_tensors(batch_path);
  const Tensor src = ref.take("src"), tgt = ref.take("tgt");

  // Forward: logits and loss.
  const data::TeacherForcing tf = data::shift_target(tgt);
  {
    NoGradGuard no_grad;
    const Var logits = model->forward(src, tf.input);
    const double err = max_rel_error(logits.value(), ref.take("logits"));
    EXPECT_LE(err, 1e-4) << "logits";
    ::testing::Test::RecordProperty(name + "_logits_max_rel_error", std::to_string(err));
    std::printf("%s: logits relative error %.3g\n", name.c_str(), err);
  }
  // Forward + backward: loss and every parameter's gradient.
  train::Adam opt(model->named_parameters());
  opt.zero_grad();
  const train::StepResult r = train::forward_backward(*model, src, tgt);
  const float ref_loss = ref.take("loss").item();
  EXPECT_LE(std::fabs(r.loss - ref_loss) / std::fabs(ref_loss), 1e-5) << r.loss << " vs " << ref_loss;
  std::printf("%s: loss relative error %.3g\n", name.c_str(), std::fabs(r.loss - ref_loss) / std::fabs(ref_loss));
  double worst_grad = 0, worst_key_bias = 0;
  // Keys are source rows (encoder self-attention, cross-attention) or target rows.
  const int64_t key_rows = std::max(src.numel(), tgt.numel());
  const auto named = model->named_parameters();
  const auto ours = [&](const std::string& n) { return testing::grad_by_name(named, n); };
  const auto theirs = [&](const std::string& n) { return ref.take("grad." + n); };
  for (const auto& [param, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << param;
    if (testing::is_key_bias(param)) {
      const auto q = testing::expect_key_bias_gradient_is_rounding(param, ours, key_rows, name + " (qkv)");
      const auto t = testing::expect_key_bias_gradient_is_rounding(param, theirs, key_rows, name + " (PyTorch)");
      worst_key_bias = std::max({worst_key_bias, q.gradient / q.bound, t.gradient / t.bound});
      continue;
    }
    const Tensor want = ref.take("grad." + param);
    const double err = max_rel_error(p.grad(), want);
    worst_grad = std::max(worst_grad, err);
    EXPECT_LE(err, 1e-4) << "grad." << param;
  }
  std::printf("%s: worst gradient relative error %.3g\n", name.c_str(), worst_grad);
  testing::print_key_bias_margin(name, worst_key_bias);
  // Ten seed training steps (the first reuses the gradient above).
  const Tensor losses = ref.take("losses");
  opt.step();
  for (int step = 1; step < 10; ++step) {
    const train::StepResult s = train::train_step(*model, opt, src, tgt);
    EXPECT_NEAR(s.loss, losses.f32()[step], 1e-5 * std::fabs(losses.f32()[step])) << "step " << step + 1;
  }
  double worst_param = 0;
  for (const auto& [param, p] : model->named_parameters()) {
    // Not the key bias: its gradient is pure rounding noise (checked above against its bound), and
    // Adam divides a gradient by its own running size, so each step moves it by ~lr in a direction
    // the noise picks. Any two correct implementations end up anywhere within 2 * steps * lr of each
    // other: no comparison there could fail.
    if (testing::is_key_bias(param)) continue;
    const Tensor want = ref.take("after10." + param);
    // Ten steps amplify the rounding of the products: Adam moves a weight whose gradient is near
    // zero by about lr whatever its sign. Worst, model_variants: 6.2e-5 with OpenBLAS's AVX2
    // kernels, 1.13e-4 with its AVX-512 ones (Cooperlake, on a Zen 4), where every gradient of the
    // first step still agrees within 1e-6.
    const double err = max_rel_error(p.value(), want);
    worst_param = std::max(worst_param, err);
    EXPECT_LE(err, 2e-4) << "after10." << param;
  }
  std::printf("%s: worst parameter relative error after 10 Adam steps %.3g\n", name.c_str(), worst_param);
}

TEST(SeedAgreement, LogitsLossGradientsAndTenAdamSteps) {
  expect_agreement("model_small", /*train_mode=*/true);  // dropout is 0: training mode is deterministic
}

// Seed 003's LayerNorm (unbiased std + eps 1e-6), GELU's tanh approximation, pre-LN, and dropout
// inside the feed-forward (off in eval mode, as PyTorch's): every option seed 000 lacks at once.
TEST(SeedAgreement, Seed003AndGpt2OptionsPreLn) {
  const std::string model_dir = testing::ref_path("model_variants");
  if (model_dir.empty()) return;
  const models::TransformerConfig c = models::load_seq2seq(model_dir)->config();
  ASSERT_EQ(c.layer_norm, "seed003");
  ASSERT_EQ(c.activation, "gelu_tanh");
  ASSERT_EQ(c.norm, models::NormPosition::Pre);
  ASSERT_FLOAT_EQ(c.layer_norm_eps, 1e-6f);
  ASSERT_GT(c.ffn_dropout, 0.f);
  expect_agreement("model_variants", /*train_mode=*/false);
}

// Every compute type against seed 000's PyTorch logits (eval mode), within what its format loses.
// Measured (2026-11-26, Zen 4), worst relative error: float32 (packed) 2.7e-7, bf16 3.9e-3, int8
// 1.0e-2, int8_bf16 9.6e-3; the lossy types' bounds about 2.5x (their errors come from the formats,
// not from summation order), float32 the BLAS path's 1e-4. (model_small has no dropout: its
// reference logits, taken in training mode, are the eval-mode ones.)
TEST(SeedAgreement, EveryComputeTypeFollowsPyTorch) {
  const std::string model_dir = testing::ref_path("model_small");
  const std::string batch_path = testing::ref_path("model_small_batch.safetensors");
  if (model_dir.empty() || batch_path.empty()) return;
  auto model = models::load_seq2seq(model_dir);
  model->eval();
  io::TensorFile ref = io::load_tensors(batch_path);
  const Tensor src = ref.take("src"), tgt = ref.take("tgt"), want = ref.take("logits");
  const data::TeacherForcing tf = data::shift_target(tgt);
  NoGradGuard no_grad;
  for (const auto& [type, bound] : {std::pair<nn::ComputeType, double>{nn::ComputeType::Float32, 1e-4},
                                    {nn::ComputeType::BF16, 1e-2}, {nn::ComputeType::Int8, 2.5e-2},
                                    {nn::ComputeType::Int8BF16, 2.5e-2}}) {
    model->set_compute_type(type);
    const double err = max_rel_error(model->forward(src, tf.input).value(), want);
    EXPECT_LE(err, bound) << nn::compute_type_name(type);
    std::printf("model_small %s: logits relative error %.3g (bound %.3g)\n", nn::compute_type_name(type), err, bound);
  }
}

TEST(SeedAgreement, ScoreMatchesPyTorch) {
  const std::string dir = testing::ref_path("model_small_score");
  const std::string model_dir = testing::ref_path("model_small");
  if (dir.empty() || model_dir.empty()) return;
  auto model = models::load_seq2seq(model_dir);
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
