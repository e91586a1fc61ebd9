// The model options seed 000 lacks, beyond their agreement with PyTorch (seed_agreement_test.cpp):
// the feed-forward's dropout (seed 003) sits after the activation and draws from the model's
// Generator, is reused by the recomputed forward of --recompute-ffn (whose gradient matches finite
// differences), acts in training mode only; the options keep every parameter name and initial
// value; config.json reads, writes and checks them.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/gradcheck.h"
#include "qkv/core/error.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/transformer.h"
#include "qkv/train/step.h"
#include "error_message.h"

namespace qkv {
namespace {

models::TransformerConfig tiny_config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 16;
  c.dropout = 0.f;
  return c;
}

Var activation(nn::Activation a, const Var& h) {
  switch (a) {
    case nn::Activation::ReLU: return fn::relu(h);
    case nn::Activation::GELU: return fn::gelu(h);
    case nn::Activation::GELUTanh: return fn::gelu_tanh(h);
    case nn::Activation::SiLU: return fn::silu(h);
  }
  return h;
}

// Training mode: y = fc2(dropout(activation(fc1(x)))) with the mask at the Generator's next
// counters, which it reserves; eval mode: no dropout and no draw.
TEST(FeedForwardDropout, FollowsTheActivationAndDrawsFromTheGenerator) {
  NoGradGuard no_grad;  // forward only: nothing left on the tape
  std::mt19937_64 rng(11);
  const Tensor x = test::randn({2, 3, 6}, rng);
  for (nn::Activation a : {nn::Activation::ReLU, nn::Activation::GELU, nn::Activation::GELUTanh, nn::Activation::SiLU}) {
    Generator gen(7);
    nn::PositionWiseFeedForward ffn(6, 10, gen, a, 0.4f);
    const uint64_t first = gen.offset();
    const Var y = ffn.forward(Var(x));
    EXPECT_EQ(gen.offset(), first + 2 * 3 * 10) << "one counter per hidden element";
    const Var hidden = activation(a, ffn.fc1.forward(Var(x)));
    const Var want = ffn.fc2.forward(fn::dropout(hidden, 0.4f, gen.seed(), first));
    EXPECT_EQ(y.value().to_vector(), want.value().to_vector());
    EXPECT_NE(y.value().to_vector(), ffn.fc2.forward(hidden).value().to_vector()) << "the mask dropped nothing";

    ffn.eval();
    const uint64_t before_eval = gen.offset();
    EXPECT_EQ(ffn.forward(Var(x)).value().to_vector(), ffn.fc2.forward(hidden).value().to_vector());
    EXPECT_EQ(gen.offset(), before_eval) << "eval mode drew a mask";
  }
}

// The gradient the recomputation produces is the gradient of the function with that mask (the
// generator is rewound before every evaluation, so each one draws the same mask).
TEST(FeedForwardDropout, RecomputedGradientMatchesFiniteDifferences) {
  Generator gen(21);
  nn::PositionWiseFeedForward ffn(4, 6, gen, nn::Activation::GELUTanh, 0.3f);
  ffn.set_recompute(true);
  const uint64_t first = gen.offset();
  std::mt19937_64 rng(5);
  EXPECT_TRUE(test::gradcheck_ok(
      [&](const std::vector<Var>& v) {
        gen.set_state(gen.seed(), first);
        return ffn.forward(v[0]);
      },
      {{"x", test::randn({2, 3, 4}, rng)}}));
}

struct StepOutcome {
  float loss = 0;
  std::vector<std::vector<float>> grads;
  uint64_t generator_offset = 0;
};

StepOutcome training_step(const models::TransformerConfig& c, bool recompute) {
  const data::SyntheticBatch b = data::synthetic_batch("copy", 4, 10, 24, 3, 0);
  models::Transformer model(c, 5);
  model.train();
  model.set_recompute_ffn(recompute);
  model.zero_grad();
  StepOutcome out;
  out.loss = train::forward_backward(model, b.src, b.tgt).loss;
  for (const auto& [name, p] : model.named_parameters()) out.grads.push_back(p.grad().to_vector());
  out.generator_offset = model.generator().offset();
  return out;
}

// The recomputed forward in backward applies the mask the forward drew (not a fresh one), so
// --recompute-ffn gives bit-identical gradients with dropout inside the feed-forward too.
TEST(FeedForwardDropout, RecomputationReusesTheMask) {
  models::TransformerConfig c = tiny_config();
  c.dropout = 0.1f;
  c.ffn_dropout = 0.3f;
  const StepOutcome kept = training_step(c, false), recomputed = training_step(c, true);
  EXPECT_EQ(kept.loss, recomputed.loss);
  EXPECT_EQ(kept.generator_offset, recomputed.generator_offset);
  ASSERT_EQ(kept.grads.size(), recomputed.grads.size());
  for (size_t i = 0; i < kept.grads.size(); ++i) EXPECT_EQ(kept.grads[i], recomputed.grads[i]) << "parameter " << i;

  c.ffn_dropout = 0.f;  // the dropout did act: without it the gradients differ
  EXPECT_NE(training_step(c, true).grads, recomputed.grads);
}

// Same weights (the option draws nothing at construction); training mode: ffn_dropout changes the
// logits; eval mode: it does not.
TEST(FeedForwardDropout, ActsInTrainingModeOnly) {
  models::TransformerConfig with = tiny_config();
  with.ffn_dropout = 0.5f;
  models::Transformer plain(tiny_config(), 3), dropped(with, 3);
  const data::SyntheticBatch b = data::synthetic_batch("random", 3, 7, 24, 1, 0);
  NoGradGuard no_grad;
  const auto logits = [&](const models::Transformer& m) { return m.forward(b.src, b.tgt).value().to_vector(); };
  EXPECT_NE(logits(dropped), logits(plain));
  dropped.eval();
  EXPECT_EQ(logits(dropped), logits(plain));
}

TEST(ModelOptions, KeepParameterNamesShapesAndInitialValues) {
  models::TransformerConfig c = tiny_config();
  c.layer_norm = "seed003";
  c.layer_norm_eps = 1e-6f;
  c.activation = "gelu_tanh";
  c.ffn_dropout = 0.1f;
  for (models::NormPosition norm : {models::NormPosition::Post, models::NormPosition::Pre}) {
    models::TransformerConfig base = tiny_config();
    base.norm = c.norm = norm;
    const auto a = models::Transformer(base, 9).named_parameters(), b = models::Transformer(c, 9).named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.value().to_vector(), b[i].second.value().to_vector()) << a[i].first;
    }
  }
}

// ---- config.json ---------------------------------------------------------------------------------

std::string config_error(const std::string& json) {
  return test_support::error_message_of([&] { models::config_from_json(json, "config.json"); }, "<accepted>");
}

TEST(ModelOptionsConfig, DefaultsAreSeed000sAndFieldsRoundTrip) {
  const models::TransformerConfig d = models::config_from_json("{}", "config.json");
  EXPECT_EQ(d.layer_norm, "standard");
  EXPECT_EQ(d.ffn_dropout, 0.f);
  EXPECT_EQ(d.activation, "relu");
  models::TransformerConfig c;
  c.layer_norm = "seed003";
  c.ffn_dropout = 0.1f;
  c.activation = "gelu_tanh";
  const models::TransformerConfig back = models::config_from_json(models::config_to_json(c), "config.json");
  EXPECT_EQ(back.layer_norm, "seed003");
  EXPECT_EQ(back.ffn_dropout, 0.1f);
  EXPECT_EQ(back.activation, "gelu_tanh");
}

TEST(ModelOptionsConfig, BadValuesAreRefusedNamingTheField) {
  EXPECT_EQ(config_error(R"({"layer_norm": "seed004"})"),
            "config.json: config: layer_norm must be \"standard\", \"seed003\" or \"rms\", got \"seed004\"");
  EXPECT_EQ(config_error(R"({"activation": "swish"})"),
            "config.json: config: activation must be \"relu\", \"gelu\", \"gelu_tanh\" or \"silu\", got \"swish\"");
  EXPECT_EQ(config_error(R"({"ffn_dropout": 1})"), "config.json: config: ffn_dropout must be in [0, 1), got 1");
  EXPECT_EQ(config_error(R"({"ffn_dropout": -0.1})"), "config.json: config: ffn_dropout must be in [0, 1), got -0.1");
  EXPECT_EQ(config_error(R"({"ffn_dropout": "0.1"})"),
            "config.json: field \"ffn_dropout\" has the wrong type (\"0.1\"), expected a number");
  EXPECT_EQ(config_error(R"({"layer_norm": 3})"), "config.json: field \"layer_norm\" has the wrong type (3)");
  // Seed 003's LayerNorm divides by the unbiased std of d_model values: undefined for one.
  EXPECT_EQ(config_error(R"({"layer_norm": "seed003", "d_model": 1, "num_heads": 1})"),
            "config.json: config: layer_norm \"seed003\" needs d_model >= 2 (it divides by the unbiased std of "
            "d_model values), got 1");
  EXPECT_EQ(config_error(R"({"layer_norm": "standard", "d_model": 1, "num_heads": 1})"), "<accepted>");
}

}  // namespace
}  // namespace qkv
