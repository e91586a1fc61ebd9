// Training-level behaviour: a steady-state step allocates no memory from the system, the copy task
// learns, checkpoints round-trip, bad checkpoints fail with the tensor or offset named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "qkv/data/synthetic.h"
#include "qkv/models/average.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"
#include "error_message.h"

namespace qkv {
namespace {

// As model_options_test's tiny config, with dropout (the steps under test draw masks).
models::TransformerConfig tiny_config_with_dropout() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 16;
  c.dropout = 0.1f;
  return c;
}

TEST(Training, SteadyStateStepAllocatesNothingFromTheSystem) {
  for (bool recompute : {false, true}) {
    models::Transformer model(tiny_config_with_dropout(), 1);
    model.train();
    model.set_recompute_ffn(recompute);
    train::Adam opt(model.named_parameters());
    const data::SyntheticBatch b = data::synthetic_batch("random", 8, 12, 24, 0, 0);
    for (int i = 0; i < 3; ++i) train::train_step(model, opt, b.src, b.tgt);  // warm-up fills the pool
    const int64_t before = BufferPool::stats().system_allocs;
    for (int i = 0; i < 3; ++i) train::train_step(model, opt, b.src, b.tgt);
    EXPECT_EQ(BufferPool::stats().system_allocs, before) << "recompute_ffn=" << recompute;
  }
}

TEST(Training, RecomputedFeedForwardGivesIdenticalGradients) {
  const data::SyntheticBatch b = data::synthetic_batch("copy", 4, 10, 24, 3, 0);
  std::vector<std::vector<float>> grads[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    auto c = tiny_config_with_dropout();
    c.dropout = 0.f;
    models::Transformer model(c, 5);
    model.set_recompute_ffn(recompute);
    model.zero_grad();
    train::forward_backward(model, b.src, b.tgt);
    for (const auto& [name, p] : model.named_parameters()) grads[recompute].push_back(p.grad().to_vector());
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[1][i]) << "parameter " << i;
}

TEST(Training, MicroBatchesGiveTheWholeBatchGradient) {
  // Rows of different lengths, so the chunks hold different numbers of labels (the weighting matters).
  const data::SyntheticBatch b = data::synthetic_batch("copy", 6, 10, 24, 11, 0);
  auto c = tiny_config_with_dropout();
  c.dropout = 0.f;
  std::vector<std::vector<float>> grads[2];
  std::vector<std::string> names;
  float losses[2] = {};
  for (int micro = 0; micro < 2; ++micro) {
    models::Transformer model(c, 9);
    names.clear();
    for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
    model.zero_grad();
    losses[micro] = train::forward_backward(model, b.src, b.tgt, 0.1f, micro ? 4 : 0).loss;  // chunks of 4 + 2 rows
    for (const auto& [name, p] : model.named_parameters()) grads[micro].push_back(p.grad().to_vector());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::fabs(losses[0]));
  for (size_t i = 0; i < grads[0].size(); ++i) {
    double diff = 0, scale = 1e-12;
    for (size_t j = 0; j < grads[0][i].size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(grads[0][i][j] - grads[1][i][j])));
      scale = std::max(scale, static_cast<double>(std::fabs(grads[0][i][j])));
    }
    // W_k's bias has an exactly-zero gradient (softmax ignores a per-row shift): only rounding
    // noise on both sides, so check it is noise-sized instead (see seed_agreement_test.cpp).
    if (names[i].find("W_k.bias") != std::string::npos) {
      EXPECT_LE(scale, 1e-6) << names[i];
      continue;
    }
    EXPECT_LE(diff / scale, 1e-5) << names[i];
  }
}

TEST(Training, CopyTaskLearns) {
  auto c = tiny_config_with_dropout();
  c.dropout = 0.f;
  c.d_model = 64;
  c.d_ff = 128;
  models::Transformer model(c, 0);
  model.train();
  train::Adam opt(model.named_parameters(), train::AdamOptions{1e-3, 0.9, 0.98, 1e-9, 0.0});
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const data::SyntheticBatch b = data::synthetic_batch("copy", 32, 10, 24, 0, step);
    const float loss = train::train_step(model, opt, b.src, b.tgt).loss;
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_GT(first, 2.5f);  // ~ln(22) at the start
  EXPECT_LT(last, 0.2f) << "the copy task should be learned in 300 steps";
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/qkv_ckpt_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    model_ = std::make_unique<models::Transformer>(tiny_config_with_dropout(), 7);
    models::save_model(dir_, *model_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string error_of_load() {
    return test_support::error_message_of([&] { models::load_seq2seq(dir_); });
  }
  std::string dir_;
  std::unique_ptr<models::Transformer> model_;
};

TEST_F(CheckpointTest, RoundTripsEveryParameter) {
  auto loaded = models::load_seq2seq(dir_);
  const auto a = model_->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.value().to_vector(), b[i].second.value().to_vector()) << a[i].first;
  }
}

// load_model builds the model without drawing its initial values (SkipRandomInitGuard), since the
// strict load sets them all; the generator must still end where a drawing constructor leaves it,
// so that dropout after loading is the same as before.
TEST_F(CheckpointTest, LoadingSkipsTheDrawsButNotTheGeneratorState) {
  EXPECT_FALSE(nn::random_init_skipped());
  {
    const nn::SkipRandomInitGuard outer;
    {
      const nn::SkipRandomInitGuard inner;
      EXPECT_TRUE(nn::random_init_skipped());
    }
    EXPECT_TRUE(nn::random_init_skipped());
  }
  EXPECT_FALSE(nn::random_init_skipped());
  auto loaded = models::load_model(dir_, 7);
  EXPECT_FALSE(nn::random_init_skipped());
  EXPECT_EQ(loaded->generator().seed(), model_->generator().seed());
  EXPECT_EQ(loaded->generator().offset(), model_->generator().offset());
  models::TransformerConfig e = models::encoder_only_defaults();
  e.tgt_vocab_size = e.src_vocab_size = 40;
  e.d_model = 16;
  e.num_heads = 2;
  e.num_layers = 1;
  e.d_ff = 32;
  e.max_seq_length = 12;
  const models::EncoderModel drawn(e, 3);
  models::save_model(dir_ + "_enc", drawn);
  const auto enc = models::load_encoder(dir_ + "_enc", "this test", 3);
  EXPECT_EQ(enc->generator().offset(), drawn.generator().offset());
  const auto a = drawn.named_parameters(), b = enc->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.value().to_vector(), b[i].second.value().to_vector()) << a[i].first;
  std::filesystem::remove_all(dir_ + "_enc");
}

TEST_F(CheckpointTest, MismatchedConfigNamesTheTensor) {
  auto c = tiny_config_with_dropout();
  c.d_ff = 48;  // every fc1/fc2 weight now has the wrong shape
  models::save_config(dir_ + "/config.json", c);
  const std::string msg = error_of_load();
  EXPECT_NE(msg.find("encoder_layers.0.feed_forward.fc1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(48, 32)"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, MissingAndExtraTensorsAreNamed) {
  auto c = tiny_config_with_dropout();
  c.num_layers = 3;  // expects encoder_layers.2.*, which the file lacks
  models::save_config(dir_ + "/config.json", c);
  EXPECT_NE(error_of_load().find("missing tensor 'encoder_layers.2."), std::string::npos) << error_of_load();
  c.num_layers = 1;  // the file has encoder_layers.1.*, which the model lacks
  models::save_config(dir_ + "/config.json", c);
  EXPECT_NE(error_of_load().find("unexpected tensor(s)"), std::string::npos) << error_of_load();
  EXPECT_NE(error_of_load().find("encoder_layers.1."), std::string::npos) << error_of_load();
}

TEST_F(CheckpointTest, TruncatedFileNamesTheOffset) {
  const std::string path = dir_ + "/model.safetensors";
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 100);
  const std::string msg = error_of_load();
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, MissingDirectoryAndBadConfigAreClear) {
  std::filesystem::remove(dir_ + "/config.json");
  EXPECT_NE(error_of_load().find("config.json: cannot open"), std::string::npos) << error_of_load();
  std::ofstream(dir_ + "/config.json") << "{\"d_model\": \"wide\"}";
  EXPECT_NE(error_of_load().find("\"d_model\" has the wrong type"), std::string::npos) << error_of_load();
  std::ofstream(dir_ + "/config.json") << "{\"d_modle\": 32}";
  EXPECT_NE(error_of_load().find("unknown field \"d_modle\""), std::string::npos) << error_of_load();
  EXPECT_THROW(models::load_seq2seq(dir_ + "/does-not-exist"), Error);
}

TEST(Adam, SaveAndLoadResumesExactly) {
  const data::SyntheticBatch b = data::synthetic_batch("copy", 4, 10, 24, 1, 0);
  auto c = tiny_config_with_dropout();
  // Reference: 4 uninterrupted steps.
  models::Transformer a(c, 3);
  train::Adam opt_a(a.named_parameters());
  for (int i = 0; i < 4; ++i) train::train_step(a, opt_a, b.src, b.tgt);
  // Interrupted after 2 steps: save model, optimizer and generator; resume in a fresh process state.
  const std::string dir = ::testing::TempDir() + "/qkv_adam_resume_" + std::to_string(::getpid());
  {
    models::Transformer m(c, 3);
    train::Adam opt(m.named_parameters());
    for (int i = 0; i < 2; ++i) train::train_step(m, opt, b.src, b.tgt);
    models::save_model(dir, m);
    opt.save(dir + "/optimizer.safetensors");
    std::ofstream(dir + "/gen") << m.generator().seed() << " " << m.generator().offset();
  }
  auto m = models::load_seq2seq(dir);
  uint64_t seed = 0, offset = 0;
  std::ifstream(dir + "/gen") >> seed >> offset;
  m->generator().set_state(seed, offset);
  m->train();
  train::Adam opt(m->named_parameters());
  opt.load(dir + "/optimizer.safetensors");
  EXPECT_EQ(opt.steps(), 2);
  for (int i = 0; i < 2; ++i) train::train_step(*m, opt, b.src, b.tgt);
  const auto pa = a.named_parameters(), pm = m->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.value().to_vector(), pm[i].second.value().to_vector()) << pa[i].first;
  std::filesystem::remove_all(dir);
}

// `qkv average`: every parameter of the result is the mean of the inputs' (tied weights included),
// one checkpoint averages to itself, and checkpoints of different models are refused by name.
TEST(Checkpoint, AverageIsTheElementwiseMean) {
  const std::string root = ::testing::TempDir() + "/qkv_average_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  for (uint64_t seed : {1, 2, 3}) models::save_model(root + "/m" + std::to_string(seed), models::Transformer(tiny_config_with_dropout(), seed));
  const auto avg = models::average_checkpoints({root + "/m1", root + "/m2", root + "/m3"});
  const auto a = models::load_seq2seq(root + "/m1"), b = models::load_seq2seq(root + "/m2"), c = models::load_seq2seq(root + "/m3");
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters(), pm = avg->named_parameters();
  ASSERT_EQ(pm.size(), pa.size());
  for (size_t i = 0; i < pm.size(); ++i) {
    const std::vector<float> va = pa[i].second.value().to_vector(), vb = pb[i].second.value().to_vector(),
                             vc = pc[i].second.value().to_vector(), vm = pm[i].second.value().to_vector();
    for (size_t j = 0; j < vm.size(); ++j)
      ASSERT_EQ(vm[j], static_cast<float>((static_cast<double>(va[j]) + vb[j] + vc[j]) / 3)) << pm[i].first << "[" << j << "]";
  }
  const auto same = models::average_checkpoints({root + "/m2"});
  const auto ps = same->named_parameters();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].second.value().to_vector(), pb[i].second.value().to_vector());

  models::TransformerConfig wider = tiny_config_with_dropout();
  wider.d_ff = 128;
  models::save_model(root + "/wide", models::Transformer(wider, 1));
  try {
    models::average_checkpoints({root + "/m1", root + "/wide"});
    ADD_FAILURE() << "averaged checkpoints of different models";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wide/config.json differs from"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace qkv
