// The corpus trainer end to end on a small generated parallel text: it trains, validates, writes
// best/ and last/ checkpoints that `qkv translate` can use, and a run stopped and resumed gives
// exactly the weights of an uninterrupted run (same thread count).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/toy_corpus.h"
#include "qkv/io/tensor_file.h"
#include "qkv/train/corpus_trainer.h"
#include "qkv/train/train_state.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

CorpusTrainOptions small_options(const std::string& data, const std::string& out) {
  CorpusTrainOptions o;
  o.src = data + "/train.es";
  o.tgt = data + "/train.en";
  o.valid_src = data + "/dev.es";
  o.valid_tgt = data + "/dev.en";
  o.out = out;
  o.spm_vocab = 300;
  o.model.d_model = 32;
  o.model.num_heads = 4;
  o.model.num_layers = 1;
  o.model.d_ff = 64;
  o.model.max_seq_length = 64;
  o.model.dropout = 0.1f;  // dropout on: resume must restore the RNG too
  o.hyper.schedule = {"inverse_sqrt", 1e-3, 5, 32};
  o.max_tokens = 400;
  o.valid_every = 6;
  o.valid_bleu_sentences = 10;
  o.log_every = 1000;
  return o;
}

std::vector<float> all_weights(const std::string& checkpoint) {
  io::TensorFile f = io::load_tensors(checkpoint + "/model.safetensors");
  std::vector<float> out;
  for (const char* name : {"encoder_embedding.weight", "decoder_layers.0.cross_attn.W_v.weight", "fc.bias"}) {
    const std::vector<float> v = f.take(name).to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(CorpusTrainer, TrainsWritesCheckpointsAndResumesExactly) {
  const std::string root = ::testing::TempDir() + "/qkv_corpus_" + std::to_string(::getpid());
  fs::remove_all(root);
  qkv::testing::write_toy_corpus(root + "/data", 400, 1);

  CorpusTrainOptions full = small_options(root + "/data", root + "/full");
  full.max_steps = 12;
  full.keep_checkpoints = 1;  // validations at steps 6 and 12: only step 12 stays
  ASSERT_FALSE(train_on_corpus(full).interrupted);
  EXPECT_FALSE(fs::exists(root + "/full/step-0000006"));
  ASSERT_TRUE(fs::exists(root + "/full/step-0000012/target.spm.model"));
  EXPECT_EQ(all_weights(root + "/full/step-0000012"), all_weights(root + "/full/last"));
  for (const char* f : {"last/config.json", "last/model.safetensors", "last/optimizer.safetensors", "last/train_state.json",
                        "last/source.spm.model", "last/target.spm.model", "best/model.safetensors", "best/target.spm.model"})
    EXPECT_TRUE(fs::exists(root + "/full/" + f)) << f;

  CorpusTrainOptions part = small_options(root + "/data", root + "/split");
  part.max_steps = 7;  // stops mid-epoch, between validations
  ASSERT_FALSE(train_on_corpus(part).interrupted);
  part.max_steps = 12;
  part.resume = true;
  ASSERT_FALSE(train_on_corpus(part).interrupted);
  EXPECT_EQ(all_weights(root + "/split/last"), all_weights(root + "/full/last"));
  fs::remove_all(root);
}

// --save-every reaches text runs (it once reached synthetic runs alone, and a text run given it saved
// at validations only): last/ is written every N steps, and at the end.
TEST(CorpusTrainer, SavesTheLastCheckpointEveryNSteps) {
  const std::string root = ::testing::TempDir() + "/qkv_corpus_save_" + std::to_string(::getpid());
  fs::remove_all(root);
  qkv::testing::write_toy_corpus(root + "/data", 200, 1);
  CorpusTrainOptions o = small_options(root + "/data", root + "/run");
  o.max_steps = 5;
  o.valid_every = 0;  // no validation: every save before the end comes from save_every
  o.save_every = 2;
  std::vector<int64_t> saved;
  TrainerEvents events;
  events.on_save = [&](const std::string& dir, int64_t step) {
    if (dir == root + "/run/last") saved.push_back(step);
  };
  ASSERT_FALSE(train_on_corpus(o, events).interrupted);
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 4, 5}));
  fs::remove_all(root);
}

// A run saved before train_state.json named its batches' length order (source-then-target plans)
// resumes in those plans, not in today's default, so it still matches its uninterrupted run.
TEST(CorpusTrainer, AStateWithoutALengthOrderResumesInSourceFirstPlans) {
  const std::string root = ::testing::TempDir() + "/qkv_corpus_order_" + std::to_string(::getpid());
  fs::remove_all(root);
  qkv::testing::write_toy_corpus(root + "/data", 400, 1);
  {  // targets 0-6 words longer than their sources, so that the two orders plan different batches
    std::ifstream in(root + "/data/train.en");
    std::string text, line;
    for (int i = 0; std::getline(in, line); ++i) {
      text += line;
      for (int w = 0; w < i * 5 % 7; ++w) text += " za";
      text += "\n";
    }
    std::ofstream(root + "/data/train.en") << text;
  }
  CorpusTrainOptions full = small_options(root + "/data", root + "/full");
  full.length_order = data::LengthOrder::SourceThenTarget;
  full.max_steps = 10;
  ASSERT_FALSE(train_on_corpus(full).interrupted);
  EXPECT_EQ(read_train_state(root + "/full/last/train_state.json").data.at("length_order"), "source_then_target");

  CorpusTrainOptions part = small_options(root + "/data", root + "/split");
  part.length_order = data::LengthOrder::SourceThenTarget;
  part.max_steps = 7;
  ASSERT_FALSE(train_on_corpus(part).interrupted);
  // What the version before the field wrote: format 1, no "length_order"; no manifest to match the edit.
  const std::string state_path = root + "/split/last/train_state.json";
  nlohmann::json state = nlohmann::json::parse(std::ifstream(state_path));
  ASSERT_EQ(state.at("data").erase("length_order"), 1u);
  state["format_version"] = 1;
  std::ofstream(state_path) << state.dump(2);
  fs::remove(root + "/split/last/manifest.json");
  part.length_order = data::LengthOrder::LongerSide;  // today's default; the saved run's order wins
  part.max_steps = 10;
  part.resume = true;
  ASSERT_FALSE(train_on_corpus(part).interrupted);
  EXPECT_EQ(all_weights(root + "/split/last"), all_weights(root + "/full/last"));
  fs::remove_all(root);
}

TEST(CorpusTrainer, BadInputIsNamed) {
  const std::string root = ::testing::TempDir() + "/qkv_corpus_bad_" + std::to_string(::getpid());
  fs::remove_all(root);
  qkv::testing::write_toy_corpus(root + "/data", 50, 2);
  CorpusTrainOptions o = small_options(root + "/data", root + "/out");
  o.max_steps = 1;
  auto message = [&](const CorpusTrainOptions& opts) -> std::string {
    try {
      train_on_corpus(opts);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CorpusTrainOptions missing = o;
  missing.src = root + "/data/nope.es";
  EXPECT_NE(message(missing).find("nope.es"), std::string::npos);
  std::ofstream(root + "/data/short.en") << "one line\n";
  CorpusTrainOptions uneven = o;
  uneven.tgt = root + "/data/short.en";
  EXPECT_NE(message(uneven).find("train.es has 45 lines but"), std::string::npos) << message(uneven);
  EXPECT_NE(message(uneven).find("short.en has 1"), std::string::npos) << message(uneven);
  std::ofstream(root + "/data/bad.es", std::ios::binary) << "hola\n\xff\xfe mundo\n";
  std::ofstream(root + "/data/bad.en") << "hello\nworld\n";
  CorpusTrainOptions utf = o;
  utf.src = root + "/data/bad.es";
  utf.tgt = root + "/data/bad.en";
  EXPECT_NE(message(utf).find("bad.es:2: invalid UTF-8"), std::string::npos) << message(utf);
  CorpusTrainOptions resume = o;
  resume.out = root + "/never-trained";
  resume.resume = true;
  EXPECT_FALSE(message(resume).empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace qkv::train
