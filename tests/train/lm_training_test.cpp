// Language-model training: packing lines into blocks, the block order per epoch and its resume,
// exact resume of a decoder-only run through the one Trainer (dropout on, AdamW with decay), and
// AdamW's decoupled decay touching matrices only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <set>

#include "qkv/models/average.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/lm_data.h"
#include "qkv/train/lm_trainer.h"
#include "qkv/train/trainer.h"
#include "file_bytes.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

models::TransformerConfig tiny_lm_config() {
  models::TransformerConfig c = models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 23;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 2;
  c.d_ff = 32;
  c.max_seq_length = 12;
  c.dropout = 0.1f;  // on: resume must restore the RNG
  c.bos_id = c.eos_id = 3;
  return c;
}

using test_support::file_bytes;

TEST(LmData, LinesArePackedWithEosAndCutIntoOverlappingBlocks) {
  const std::vector<int32_t> stream = pack_lines({{5, 6}, {7}, {8, 9, 10}}, 3, 3);
  EXPECT_EQ(stream, (std::vector<int32_t>{3, 5, 6, 3, 7, 3, 8, 9, 10, 3}));
  const std::vector<data::IdLine> full = cut_blocks(stream, 4, false);
  ASSERT_EQ(full.size(), 2u);  // [3 5 6 3 7] [7 3 8 9 10]; the tail [10 3] is dropped
  EXPECT_EQ(full[0], (data::IdLine{3, 5, 6, 3, 7}));
  EXPECT_EQ(full[1], (data::IdLine{7, 3, 8, 9, 10}));
  const std::vector<data::IdLine> all = cut_blocks(stream, 4, true);
  ASSERT_EQ(all.size(), 3u);  // validation keeps it: every token is a label once
  EXPECT_EQ(all[2], (data::IdLine{10, 3}));
  int64_t labels = 0;
  for (const auto& b : all) labels += static_cast<int64_t>(b.size()) - 1;
  EXPECT_EQ(labels, static_cast<int64_t>(stream.size()) - 1);
}

TEST(LmData, EveryBlockOncePerEpochInAnOrderThatChangesAndResumes) {
  std::vector<int32_t> stream(101);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<int32_t>(i);
  LanguageModelData data(stream, 4, 3, 7);  // 25 blocks, 9 batches (the last of 1 block)
  ASSERT_EQ(data.blocks(), 25);
  const auto epoch_firsts = [&] {
    std::vector<int32_t> firsts;
    for (int64_t b = 0; b < data.batches_per_epoch(); ++b) {
      const data::Batch batch = data.next();
      EXPECT_EQ(batch.tgt.size(1), 5);
      for (int64_t r = 0; r < batch.tgt.size(0); ++r) firsts.push_back(batch.tgt.i32()[r * 5]);
    }
    return firsts;
  };
  const std::vector<int32_t> e0 = epoch_firsts();
  EXPECT_EQ(data.epoch(), 1);
  EXPECT_EQ(std::set<int32_t>(e0.begin(), e0.end()).size(), 25u);
  const nlohmann::json saved = (data.next(), data.state());
  const data::Batch expected = data.next();
  LanguageModelData resumed(stream, 4, 3, 7);
  resumed.restore(saved, 0);
  const data::Batch got = resumed.next();
  ASSERT_EQ(got.tgt.numel(), expected.tgt.numel());
  EXPECT_TRUE(std::equal(got.tgt.i32(), got.tgt.i32() + got.tgt.numel(), expected.tgt.i32()));
  EXPECT_NE(e0, epoch_firsts());  // epoch 1 (from here on) is shuffled differently
  LanguageModelData other_text(std::vector<int32_t>(stream.begin(), stream.end() - 8), 4, 3, 7);
  EXPECT_THROW(other_text.restore(saved, 0), Error);
  EXPECT_THROW(LanguageModelData({1, 2, 3}, 4, 3, 7), Error);  // shorter than one block
}

TrainResult train_lm(const std::string& dir, int64_t steps, bool resume) {
  std::unique_ptr<models::CausalLM> model =
      resume ? models::load_causal_lm(dir) : std::make_unique<models::CausalLM>(tiny_lm_config(), 11);
  std::vector<int32_t> stream(400);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<int32_t>((i * 7 + i / 5) % 23);
  LanguageModelData data(stream, 8, 4, 3);
  TrainerOptions o;
  o.hyper = default_lm_hyper();
  o.hyper.schedule = {"inverse_sqrt", 3e-3, 2, 16};
  o.last_dir = dir;
  o.max_steps = steps;
  Trainer trainer(*model, data, o);
  if (resume) trainer.resume(dir, read_train_state(dir + "/train_state.json"));
  return trainer.run();
}

TEST(LmTraining, ResumedRunIsByteIdenticalToAnUninterruptedOne) {
  const std::string root = ::testing::TempDir() + "/qkv_lm_" + std::to_string(::getpid());
  fs::remove_all(root);
  train_lm(root + "/full", 9, false);
  train_lm(root + "/split", 4, false);
  EXPECT_EQ(train_lm(root + "/split", 9, true).step, 9);
  EXPECT_EQ(file_bytes(root + "/full/model.safetensors"), file_bytes(root + "/split/model.safetensors"));
  EXPECT_EQ(file_bytes(root + "/full/optimizer.safetensors"), file_bytes(root + "/split/optimizer.safetensors"));
  EXPECT_EQ(read_train_state(root + "/split/train_state.json").kind, "language-model");
  // Averaging works on any family: the mean of a checkpoint with itself is that checkpoint.
  const std::unique_ptr<models::Model> mean = models::average_checkpoints({root + "/full", root + "/split"});
  models::save_model(root + "/mean", *mean);
  const auto averaged = models::load_causal_lm(root + "/mean");
  const auto full = models::load_causal_lm(root + "/full");
  EXPECT_EQ(averaged->token_embedding.weight.value().to_vector(), full->token_embedding.weight.value().to_vector());
  // A language-model checkpoint is not a translation model, and says so.
  try {
    models::load_seq2seq(root + "/full");
    ADD_FAILURE() << "a decoder-only checkpoint loaded as encoder-decoder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder-only checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("encoder-decoder model"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

TEST(LmTraining, LossFallsOnARepeatingText) {
  const std::string dir = ::testing::TempDir() + "/qkv_lm_fall_" + std::to_string(::getpid());
  fs::remove_all(dir);
  models::TransformerConfig c = tiny_lm_config();
  c.dropout = 0.f;
  models::CausalLM model(c, 1);
  std::vector<int32_t> stream;
  for (int rep = 0; rep < 40; ++rep)
    for (int32_t t : {4, 9, 12, 4, 17, 5, 8, 3}) stream.push_back(t);
  LanguageModelData data(stream, 8, 8, 1);
  const std::vector<data::IdLine> blocks = cut_blocks(stream, 8, true);
  const double before = language_model_loss(model, blocks, 8);
  TrainerOptions o;
  o.hyper = default_lm_hyper();
  o.hyper.schedule = {"constant", 1e-2, 1, 16};
  o.max_steps = 60;
  Trainer(model, data, o).run();
  const double after = language_model_loss(model, blocks, 8);
  EXPECT_NEAR(before, std::log(23.0), 0.3);  // GPT-2 initialisation starts near uniform
  EXPECT_LT(after, 0.2) << "a period-8 sequence is predictable from the context";
  fs::remove_all(dir);
}

TEST(AdamW, DecoupledDecayShrinksMatricesOnly) {
  models::TransformerConfig c = tiny_lm_config();
  models::CausalLM model(c, 2);
  std::vector<std::pair<std::string, Tensor>> before;
  for (const auto& [name, v] : model.named_parameters()) before.emplace_back(name, v.value().clone());
  Adam adamw(model.named_parameters(), {0.5, 0.9, 0.95, 1e-8, 0.1, true});
  for (const Var& p : model.parameters()) *p.grad_slot() = Tensor::zeros(p.shape());  // zero gradient: only decay acts
  adamw.step();
  size_t i = 0;
  for (const auto& [name, v] : model.named_parameters()) {
    const Tensor& old = before[i++].second;
    const float factor = v.value().dim() >= 2 ? 1.f - 0.5f * 0.1f : 1.f;
    for (int64_t j = 0; j < old.numel(); ++j)
      ASSERT_FLOAT_EQ(v.value().f32()[j], old.f32()[j] * factor) << name << "[" << j << "]";
  }
}

}  // namespace
}  // namespace qkv::train
