// The library Trainer and all-or-nothing checkpoints: exact resume through the Trainer, a mixed
// checkpoint set refused, a diverging run stopped naming the step without touching the last good
// checkpoint, non-finite or mis-tied weights refused at load, leftovers of killed saves cleaned up,
// and training states of earlier versions read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "qkv/io/checkpoint_dir.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/trainer.h"
#include "error_message.h"
#include "file_bytes.h"
#include "tiny_translation.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

std::string trainer_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_trainer_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  return d;
}

using test_support::file_bytes;

using qkv::test_support::error_message_of;

TEST(Trainer, ResumedRunIsByteIdenticalToAnUninterruptedOne) {
  const std::string full = trainer_dir("full"), split = trainer_dir("split");
  train_copy_task(full, 8, false);
  train_copy_task(split, 3, false);
  EXPECT_EQ(train_copy_task(split, 8, true).step, 8);
  EXPECT_EQ(file_bytes(full + "/model.safetensors"), file_bytes(split + "/model.safetensors"));
  EXPECT_EQ(file_bytes(full + "/optimizer.safetensors"), file_bytes(split + "/optimizer.safetensors"));
  EXPECT_EQ(io::verify_manifest(split).step, 8);
  fs::remove_all(full);
  fs::remove_all(split);
}

// A decaying schedule's end (total_steps) is saved with the run, so the resumed half follows the
// same line down.
TEST(Trainer, LinearScheduleResumesToTheSameBytes) {
  const std::string full = trainer_dir("linear_full"), split = trainer_dir("linear_split");
  const Schedule linear{"linear", 0, 2, 16, 8};
  train_copy_task(full, 8, false, 1e-3, 0, linear);
  train_copy_task(split, 3, false, 1e-3, 0, linear);
  const TrainState saved = read_train_state(split + "/train_state.json");
  EXPECT_EQ(saved.hyper.schedule.kind, "linear");
  EXPECT_EQ(saved.hyper.schedule.total_steps, 8);
  EXPECT_EQ(train_copy_task(split, 8, true, 1e-3, 0, saved.hyper.schedule).step, 8);
  EXPECT_EQ(file_bytes(full + "/model.safetensors"), file_bytes(split + "/model.safetensors"));
  EXPECT_EQ(file_bytes(full + "/optimizer.safetensors"), file_bytes(split + "/optimizer.safetensors"));
  fs::remove_all(full);
  fs::remove_all(split);
}

// A time budget that cuts a decaying schedule short says so, and how to fit it.
TEST(Trainer, TimeBudgetBeforeTheScheduleEndsSaysTheRateHadNotReachedZero) {
  const std::string dir = trainer_dir("budget");
  std::unique_ptr<models::Transformer> model = std::make_unique<models::Transformer>(tiny_translation_config(), 5);
  SyntheticData data("copy", 4, 6, 20, 9);
  TrainerOptions o;
  o.hyper.schedule = {"linear", 1e-3, 2, 16, 50};
  o.last_dir = dir;
  o.max_steps = 50;
  o.time_budget = 1e-9;  // used up before the first or second step
  const TrainResult r = Trainer(*model, data, o).run();
  EXPECT_LE(r.step, 1);
  EXPECT_NE(r.stop_reason.find("time budget used (the linear schedule ends at step 50: its rate had not reached 0"),
            std::string::npos)
      << r.stop_reason;
  fs::remove_all(dir);
}

// Without a last step, a linear schedule takes the steps that fit the time budget, fixed at the end
// of the warm-up, said once and saved with the run.
TEST(Trainer, LinearScheduleWithoutStepsFitsItsEndToTheTimeBudget) {
  const std::string dir = trainer_dir("fit");
  std::unique_ptr<models::Transformer> model = std::make_unique<models::Transformer>(tiny_translation_config(), 5);
  SyntheticData data("copy", 4, 6, 20, 9);
  TrainerOptions o;
  o.hyper.schedule = {"linear", 1e-3, 2, 16, 0};
  o.last_dir = dir;
  o.max_steps = 4;
  o.time_budget = 3600;
  std::vector<std::string> said;
  TrainerEvents events;
  events.on_info = [&](const std::string& m) { said.push_back(m); };
  EXPECT_EQ(Trainer(*model, data, o).run(events).step, 4);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("the linear schedule falls to 0 at step "), std::string::npos) << said[0];
  const int64_t end = read_train_state(dir + "/train_state.json").hyper.schedule.total_steps;
  EXPECT_GT(end, 1000);  // an hour at well under a second a step
  o.time_budget = 0;  // and without either, refused by name
  const std::string msg = error_message_of([&] { Trainer(*model, data, o); });
  EXPECT_NE(msg.find("give --steps, or --time-budget"), std::string::npos) << msg;
  fs::remove_all(dir);
}

// train_state.json records the products' precision (--precision); a value qkv does not know is
// refused naming the file and the field, never trained on as float32.
TEST(Trainer, AnUnknownPrecisionInTrainStateIsRefused) {
  const std::string dir = trainer_dir("precision_field");
  train_copy_task(dir, 2, false);
  const std::string path = dir + "/train_state.json";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(read_train_state(path).hyper.precision, "float32");
  const size_t at = text.find("\"precision\": \"float32\"");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, std::string("\"precision\": \"float32\"").size(), "\"precision\": \"fp16\"");
  std::ofstream(path, std::ios::trunc) << text;
  const std::string msg = error_message_of([&] { read_train_state(path); });
  EXPECT_NE(msg.find("train_state.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("precision must be float32 or bf16, got fp16"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Trainer, MixedCheckpointSetIsRefused) {
  const std::string a = trainer_dir("mixed_a"), b = trainer_dir("mixed_b");
  train_copy_task(a, 2, false);
  train_copy_task(b, 3, false);
  // Without a manifest (as written by qkv 0.1), the optimizer's step still gives the mix away.
  fs::remove(a + "/manifest.json");
  fs::copy_file(b + "/optimizer.safetensors", a + "/optimizer.safetensors", fs::copy_options::overwrite_existing);
  std::string msg = error_message_of([&] { train_copy_task(a, 5, true); });
  EXPECT_NE(msg.find("optimizer.safetensors is of step 3 but train_state.json of step 2"), std::string::npos) << msg;
  // With a manifest: any file from another save is named.
  train_copy_task(a, 2, false);
  fs::copy_file(b + "/model.safetensors", a + "/model.safetensors", fs::copy_options::overwrite_existing);
  msg = error_message_of([&] { train_copy_task(a, 5, true); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mixed or damaged checkpoint"), std::string::npos) << msg;
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, DivergenceStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  const std::string dir = trainer_dir("nan");
  train_copy_task(dir, 2, false);
  // An absurd learning rate overflows the weights within a few steps.
  const std::string msg = error_message_of([&] { train_copy_task(dir, 50, true, 1e38, 1); });
  EXPECT_NE(msg.find("step "), std::string::npos) << msg;
  EXPECT_NE(msg.find("training stopped without saving"), std::string::npos) << msg;
  // Whatever was saved before the divergence loads (finite) and is a consistent set.
  EXPECT_NO_THROW(models::load_seq2seq(dir));
  EXPECT_NO_THROW(io::verify_manifest(dir));
  EXPECT_GE(io::verify_manifest(dir).step, 2);
  fs::remove_all(dir);
}

TEST(Checkpoint, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const std::string dir = trainer_dir("inf");
  models::Transformer model(tiny_translation_config(), 1);
  model.fc.bias.value().f32()[3] = std::numeric_limits<float>::infinity();
  std::string msg = error_message_of([&] { models::save_model(dir, model); });
  EXPECT_NE(msg.find("'fc.bias' holds a non-finite value"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  // A file written by someone else with a NaN is refused at load.
  model.fc.bias.value().f32()[3] = 0.f;
  models::save_model(dir, model);
  io::TensorFile f = io::load_tensors(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, var] : model.named_parameters()) tensors.emplace_back(name, var.value().clone());
  tensors.back().second.f32()[0] = std::numeric_limits<float>::quiet_NaN();  // fc.bias
  io::save_tensors(dir + "/model.safetensors", tensors);
  fs::remove(dir + "/manifest.json");
  msg = error_message_of([&] { models::load_seq2seq(dir); });
  EXPECT_NE(msg.find("tensor '" + tensors.back().first + "' holds a non-finite value"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Checkpoint, TiedConfigOnUntiedWeightsIsRefused) {
  const std::string dir = trainer_dir("tie");
  models::Transformer untied(tiny_translation_config(), 1);
  models::save_model(dir, untied);
  models::TransformerConfig tied = tiny_translation_config();
  tied.tie_output_embedding = true;
  models::save_config(dir + "/config.json", tied);
  const std::string msg = error_message_of([&] { models::load_seq2seq(dir); });
  EXPECT_NE(msg.find("tie_output_embedding: true, but 'fc.weight' differs"), std::string::npos) << msg;
  // A genuinely tied model round-trips.
  models::Transformer model(tied, 2);
  models::save_model(dir, model);
  EXPECT_NO_THROW(models::load_seq2seq(dir));
  fs::remove_all(dir);
}

TEST(CheckpointDir, LeftoversOfKilledSavesAreRemovedAndUserFoldersProtected) {
  const std::string root = trainer_dir("leftovers");
  fs::create_directories(root);
  const pid_t dead = 999999;  // above the default pid_max: never a live process here
  fs::create_directories(root + "/.ckpt.staging-" + std::to_string(dead));
  std::ofstream(root + "/train_state.json.tmp." + std::to_string(dead)) << "half";
  {
    io::StagedDirectory s(root + "/ckpt");
    s.write("a.txt", "one");
    s.commit(1);
  }
  EXPECT_FALSE(fs::exists(root + "/.ckpt.staging-" + std::to_string(dead)));
  EXPECT_FALSE(fs::exists(root + "/train_state.json.tmp." + std::to_string(dead)));
  {
    io::StagedDirectory s(root + "/ckpt");  // replaces the whole set
    s.write("b.txt", "two");
    s.commit(2);
  }
  EXPECT_FALSE(fs::exists(root + "/ckpt/a.txt"));
  EXPECT_EQ(io::verify_manifest(root + "/ckpt").step, 2);
  { io::StagedDirectory uncommitted(root + "/ckpt"); }  // an exception before commit: nothing changes
  EXPECT_EQ(file_bytes(root + "/ckpt/b.txt"), "two");
  std::ofstream(root + "/b.txt.extra") << "x";
  // A folder with other things in it is never replaced.
  fs::create_directories(root + "/photos");
  std::ofstream(root + "/photos/cat.jpg") << "meow";
  const std::string msg = error_message_of([&] { io::StagedDirectory s(root + "/photos"); });
  EXPECT_NE(msg.find("is not a checkpoint"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(root + "/photos/cat.jpg"));
  fs::remove_all(root);
}

TEST(TrainState, EarlierFormatsAreRead) {
  const std::string dir = trainer_dir("legacy");
  fs::create_directories(dir);
  std::ofstream(dir + "/synthetic.json") << R"({"step": 7, "generator_seed": 1, "generator_offset": 99, "task": "copy",
      "batch": 4, "len": 6, "data_seed": 3, "lr": 0.002})";
  TrainState s = read_train_state(dir + "/synthetic.json");
  EXPECT_EQ(s.kind, "synthetic");
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.gen_offset, 99u);
  EXPECT_DOUBLE_EQ(s.hyper.schedule.lr, 0.002);
  EXPECT_EQ(s.data.at("task"), "copy");
  std::ofstream(dir + "/corpus.json") << R"({"step": 12, "epoch": 1, "batch_index": 3, "batcher_seed": 0,
      "generator_seed": 0, "generator_offset": 5, "best": 1.5, "bad_validations": 1, "elapsed_seconds": 2.5})";
  s = read_train_state(dir + "/corpus.json");
  EXPECT_EQ(s.kind, "translation");
  EXPECT_FALSE(s.has_hyper);
  EXPECT_EQ(s.data.at("index"), 3);
  std::ofstream(dir + "/future.json") << R"({"format": "qkv-train-state", "format_version": 99})";
  EXPECT_NE(error_message_of([&] { read_train_state(dir + "/future.json"); }).find("newer than this qkv reads"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::train
