// qkv's decoder-only model (models/causal_lm.h) against a plain PyTorch GPT (tests/python/gpt_model.py,
// data from tests/python/make_gpt_refs.py): same weights, same batch, dropout 0 -> same logits, loss,
// every gradient, every parameter after 10 AdamW steps, and the same greedy continuations when qkv
// generates through its KV cache (prefill + step) while PyTorch reruns the whole sequence.
//   gpt_small    learned positions, tanh GELU, lm_head tied to the token embedding
//   gpt_variant  sinusoidal positions, erf GELU, untied lm_head, layer_norm_eps 1e-6
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/agreement_checks.h"
#include "model/ref_dir.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

using testing::max_rel_error;

// The state_dict names a decoder-only model of this config must expose (causal_lm.h).
std::vector<std::string> expected_parameter_names(const models::TransformerConfig& c, bool learned_positions) {
  std::vector<std::string> names = {"token_embedding.weight"};
  if (learned_positions) names.push_back("position_embedding.weight");
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (const char* p : {"norm1", "self_attn.W_q", "self_attn.W_k", "self_attn.W_v", "self_attn.W_o", "norm2",
                          "feed_forward.fc1", "feed_forward.fc2"})
      for (const char* w : {".weight", ".bias"}) names.push_back(l + p + w);
  }
  names.push_back("final_norm.weight");
  names.push_back("final_norm.bias");
  names.push_back("lm_head.weight");
  return names;
}

constexpr double kGptLr = 1e-3;
constexpr int kGptSteps = 10;

// <name>/ holds the checkpoint, <name>_batch.safetensors the batch ids (3, 17), PyTorch's logits of
// ids[:, :-1], the loss against ids[:, 1:] (mean, nothing ignored), every gradient (a tied matrix's
// under both of its names) and every parameter after 10 AdamW steps on that batch.
void expect_training_agreement(const std::string& name) {
  const std::string model_dir = testing::ref_path(name);
  const std::string batch_path = testing::ref_path(name + "_batch.safetensors");
  if (model_dir.empty() || batch_path.empty()) return;
  auto model = models::load_causal_lm(model_dir);
  model->train(true);  // dropout 0: deterministic
  io::TensorFile ref = io::load_tensors(batch_path);
  const Tensor ids = ref.take("ids");

  // Every parameter of the contract is there (a tied lm_head.weight may be listed or not).
  {
    const models::TransformerConfig& c = model->config();
    std::set<std::string> have;
    for (const auto& [param, p] : model->named_parameters()) have.insert(param);
    for (const std::string& want : expected_parameter_names(c, model->position_embedding != nullptr)) {
      if (want == "lm_head.weight" && c.tie_output_embedding) continue;
      EXPECT_TRUE(have.count(want)) << name << ": no parameter " << want;
    }
  }

  // Forward: logits.
  const data::TeacherForcing tf = data::shift_target(ids);
  {
    NoGradGuard no_grad;
    const Var logits = model->forward(tf.input);
    const double err = max_rel_error(logits.value(), ref.take("logits"));
    EXPECT_LE(err, 1e-4) << name << ": logits";
    ::testing::Test::RecordProperty(name + "_logits_max_rel_error", std::to_string(err));
    std::printf("%s: logits relative error %.3g\n", name.c_str(), err);
  }

  // Forward + backward: loss and every parameter's gradient. src is ignored by a decoder-only model.
  train::AdamOptions options;
  options.lr = kGptLr;
  options.beta1 = 0.9;
  options.beta2 = 0.95;
  options.eps = 1e-8;
  options.weight_decay = 0.1;
  options.decoupled_weight_decay = true;  // AdamW: decays the parameters with dim() >= 2
  train::Adam opt(model->named_parameters(), options);
  opt.zero_grad();
  const train::StepResult r = train::forward_backward(*model, Tensor(), ids);
  const float ref_loss = ref.take("loss").item();
  const double loss_err = std::fabs(r.loss - ref_loss) / std::fabs(ref_loss);
  EXPECT_LE(loss_err, 1e-5) << name << ": loss " << r.loss << " vs " << ref_loss;
  EXPECT_EQ(r.target_tokens, ids.size(0) * (ids.size(1) - 1)) << "no label is padding (pad_id -1)";
  std::printf("%s: loss relative error %.3g\n", name.c_str(), loss_err);
  double worst_grad = 0;
  std::string worst_grad_name;
  double worst_key_bias = 0;
  const auto named = model->named_parameters();
  const auto ours = [&](const std::string& n) { return testing::grad_by_name(named, n); };
  const auto theirs = [&](const std::string& n) { return ref.take("grad." + n); };
  for (const auto& [param, p] : named) {
    ASSERT_TRUE(p.grad().defined()) << param;
    if (testing::is_key_bias(param)) {
      const auto q = testing::expect_key_bias_gradient_is_rounding(param, ours, ids.numel(), name + " (qkv)");
      const auto t = testing::expect_key_bias_gradient_is_rounding(param, theirs, ids.numel(), name + " (PyTorch)");
      worst_key_bias = std::max({worst_key_bias, q.gradient / q.bound, t.gradient / t.bound});
      continue;
    }
    const Tensor want = ref.take("grad." + param);
    const double err = max_rel_error(p.grad(), want);
    if (err > worst_grad) worst_grad = err, worst_grad_name = param;
    EXPECT_LE(err, 1e-4) << name << ": grad." << param;
  }
  std::printf("%s: worst gradient relative error %.3g (%s)\n", name.c_str(), worst_grad, worst_grad_name.c_str());
  testing::print_key_bias_margin(name, worst_key_bias);

  // Ten AdamW steps on the same batch (the first reuses the gradient above).
  const Tensor losses = ref.take("losses");
  opt.step();
  double worst_loss = loss_err;
  for (int step = 1; step < kGptSteps; ++step) {
    const train::StepResult s = train::train_step(*model, opt, Tensor(), ids);
    const double want = losses.f32()[step];
    EXPECT_NEAR(s.loss, want, 1e-5 * std::fabs(want)) << name << ": loss of step " << step + 1;
    worst_loss = std::max(worst_loss, std::fabs(s.loss - want) / std::fabs(want));
  }
  std::printf("%s: worst loss relative error over %d steps %.3g\n", name.c_str(), kGptSteps, worst_loss);
  double worst_param = 0;
  std::string worst_param_name;
  for (const auto& [param, p] : model->named_parameters()) {
    // Not the key bias: its gradient is pure rounding noise (checked above against its bound), and
    // Adam divides a gradient by its own running size, so each step moves it by ~lr in a direction
    // the noise picks. Any two correct implementations end up anywhere within 2 * steps * lr of each
    // other: no comparison there could fail.
    if (testing::is_key_bias(param)) continue;
    const Tensor want = ref.take("after10." + param);
    const double err = max_rel_error(p.value(), want);
    if (err > worst_param) worst_param = err, worst_param_name = param;
    EXPECT_LE(err, 1e-4) << name << ": after10." << param;
  }
  std::printf("%s: worst parameter relative error after %d AdamW steps %.3g (%s)\n", name.c_str(), kGptSteps,
              worst_param, worst_param_name.c_str());
}

// <name>_greedy.json: 5 prompts (lengths 1..6), PyTorch's 8 greedy tokens for each (the full model
// rerun on the growing sequence) and the logits of each of those tokens. qkv generates them with
// prefill + step, for the 5 prompts batched (left-padded to a common length) and for each alone.
void expect_greedy_agreement(const std::string& name) {
  const std::string model_dir = testing::ref_path(name);
  const std::string json_path = testing::ref_path(name + "_greedy.json");
  if (model_dir.empty() || json_path.empty()) return;
  auto model = models::load_causal_lm(model_dir);
  model->eval();
  std::ifstream in(json_path);
  const nlohmann::json ref = nlohmann::json::parse(in);
  const auto all_prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto continuations = ref["continuations"].get<std::vector<std::vector<int32_t>>>();
  const auto step_logits = ref["step_logits"].get<std::vector<std::vector<std::vector<float>>>>();
  const auto first_logits = ref["first_logits"].get<std::vector<std::vector<float>>>();
  const int64_t new_tokens = ref["max_new_tokens"].get<int64_t>();
  const int64_t V = model->output_vocab_size();
  ASSERT_EQ(all_prompts.size(), continuations.size());

  double worst = 0;
  // Batches: all prompts together, then each alone. `rows` are indices into the reference lists.
  std::vector<std::vector<size_t>> batches = {{}};
  for (size_t i = 0; i < all_prompts.size(); ++i) batches[0].push_back(i), batches.push_back({i});
  for (const std::vector<size_t>& rows : batches) {
    const std::string what = name + (rows.size() > 1 ? " batched" : " prompt " + std::to_string(rows[0]));
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i : rows) prompts.push_back(all_prompts[i]);
    NoGradGuard no_grad;
    models::GenerationState state;
    Var logits = model->prefill(prompts, new_tokens, state);
    for (int64_t k = 0; k < new_tokens; ++k) {
      ASSERT_EQ(logits.value().shape(), (Dims{static_cast<int64_t>(rows.size()), V})) << what;
      const std::vector<float> all = logits.value().to_vector();
      std::vector<int32_t> next;
      for (size_t r = 0; r < rows.size(); ++r) {
        const std::vector<float> row(all.begin() + static_cast<int64_t>(r) * V,
                                     all.begin() + static_cast<int64_t>(r + 1) * V);
        const double err = max_rel_error(row, step_logits[rows[r]][k]);
        worst = std::max(worst, err);
        EXPECT_LE(err, 1e-4) << what << ": logits of new token " << k << " of prompt " << rows[r];
        if (k == 0) {
          EXPECT_LE(max_rel_error(row, first_logits[rows[r]]), 1e-4) << what << ": first logits";
        }
        const auto argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        EXPECT_EQ(argmax, continuations[rows[r]][k]) << what << ": new token " << k << " of prompt " << rows[r];
        next.push_back(continuations[rows[r]][k]);  // PyTorch's token, so one flip does not derail the rest
      }
      if (k + 1 < new_tokens)
        logits = model->step(Tensor::from_ids(Dims{static_cast<int64_t>(next.size())}, next), state);
    }
  }
  std::printf("%s: greedy tokens identical; worst logits relative error through the KV cache %.3g\n", name.c_str(),
              worst);
}

TEST(GptAgreement, SmallLogitsLossGradientsAndTenAdamWSteps) {
  const std::string dir = testing::ref_path("gpt_small");
  if (dir.empty()) return;
  const models::TransformerConfig c = models::load_causal_lm(dir)->config();
  ASSERT_TRUE(c.tie_output_embedding);
  ASSERT_EQ(c.activation, "gelu_tanh");
  expect_training_agreement("gpt_small");
}

TEST(GptAgreement, VariantLogitsLossGradientsAndTenAdamWSteps) {
  const std::string dir = testing::ref_path("gpt_variant");
  if (dir.empty()) return;
  auto model = models::load_causal_lm(dir);
  ASSERT_FALSE(model->config().tie_output_embedding);
  ASSERT_EQ(model->config().activation, "gelu");
  ASSERT_FLOAT_EQ(model->config().layer_norm_eps, 1e-6f);
  ASSERT_NE(model->positional_encoding, nullptr) << "sinusoidal positions";
  expect_training_agreement("gpt_variant");
}

TEST(GptAgreement, SmallGreedyThroughKvCache) { expect_greedy_agreement("gpt_small"); }

TEST(GptAgreement, VariantGreedyThroughKvCache) { expect_greedy_agreement("gpt_variant"); }

}  // namespace
}  // namespace qkv
