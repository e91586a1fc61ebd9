// `qkv train` as a user runs it, for the reliability promises: Ctrl-C during synthetic training
// saves and exits 130, a resumed run keeps the saved learning rate, a diverging run stops with an
// error naming the step and saves nothing, and nonsense flags are usage errors naming the flag.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_util.h"

namespace {
namespace fs = std::filesystem;

using qkv::testing::CliRun;
using qkv::testing::read_file;
using qkv::testing::run_qkv;
using qkv::testing::temp_dir;

CliRun qkv_train(const std::string& args) { return run_qkv("train " + args); }

const std::string kTiny = "--synthetic --preset tiny --d-model 32 --heads 2 --layers 1 --d-ff 64 --threads 1 ";

TEST(TrainCli, CtrlCSavesAndResumeContinues) {
  const std::string d = temp_dir("sigint");
  const int status = qkv::testing::interrupt_at_step("train " + kTiny + "--steps 1000000 --output-dir " + d + "/ckpt",
                                                    d + "/log", 3);
  ASSERT_NE(status, -1) << read_file(d + "/log");
  const std::string log = read_file(d + "/log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_NE(log.find("qkv train: interrupted at step "), std::string::npos) << log;
  const int64_t saved = nlohmann::json::parse(read_file(d + "/ckpt/train_state.json"))["step"].get<int64_t>();
  EXPECT_GE(saved, 3);
  const CliRun r = qkv_train(kTiny + "--steps " + std::to_string(saved + 2) + " --resume " + d + "/ckpt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step " + std::to_string(saved + 2) + "/"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(TrainCli, ResumeKeepsTheSavedLearningRate) {
  const std::string d = temp_dir("lr");
  ASSERT_EQ(qkv_train(kTiny + "--lr 5e-3 --steps 10 --output-dir " + d + "/full").code, 0);
  ASSERT_EQ(qkv_train(kTiny + "--lr 5e-3 --steps 5 --output-dir " + d + "/split").code, 0);
  const CliRun r = qkv_train(kTiny + "--steps 10 --resume " + d + "/split");  // no --lr: the saved one
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_file(d + "/full/model.safetensors"), read_file(d + "/split/model.safetensors"));
  EXPECT_EQ(read_file(d + "/full/optimizer.safetensors"), read_file(d + "/split/optimizer.safetensors"));
  fs::remove_all(d);
}

TEST(TrainCli, InfoDescribesAndChecksACheckpoint) {
  const std::string d = temp_dir("info");
  ASSERT_EQ(qkv_train(kTiny + "--steps 4 --output-dir " + d + "/a").code, 0);
  ASSERT_EQ(qkv_train(kTiny + "--steps 5 --output-dir " + d + "/b").code, 0);
  CliRun info = run_qkv("info " + d + "/a");
  const std::string& out = info.out;
  EXPECT_EQ(info.code, 0) << out;
  EXPECT_NE(out.find("architecture  encoder-decoder"), std::string::npos) << out;
  EXPECT_NE(out.find("synthetic, step 4,"), std::string::npos) << out;
  EXPECT_NE(out.find("manifest.json verified"), std::string::npos) << out;
  // The compute types it can run in on this CPU, each with its kernels and the memory it prepares.
  EXPECT_NE(out.find("compute type  float32 by default"), std::string::npos) << out;
  for (const char* type : {"\n  float32 ", "\n  int8 ", "\n  bf16 ", "\n  int8_bf16 "})
    EXPECT_NE(out.find(type), std::string::npos) << type << " missing in\n" << out;
  EXPECT_NE(out.find("int8 GEMM"), std::string::npos) << out;
  const CliRun json = run_qkv("info --json " + d + "/a");
  EXPECT_NE(json.out.find("\"compute_types\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"inference_bytes\""), std::string::npos) << json.out;
  fs::copy_file(d + "/b/model.safetensors", d + "/a/model.safetensors", fs::copy_options::overwrite_existing);
  info = run_qkv("info " + d + "/a");
  EXPECT_EQ(info.code, 1) << info.out;
  EXPECT_NE(info.out.find("mixed or damaged checkpoint"), std::string::npos) << info.out;
  fs::remove_all(d);
}

TEST(TrainCli, LinearScheduleFallsToZeroAtStepsAndInfoShowsIt) {
  const std::string d = temp_dir("linear");
  const CliRun r = qkv_train(kTiny + "--schedule linear --lr 1e-3 --warmup 2 --steps 6 --output-dir " + d + "/a");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 2/6 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lr 1.00e-03"), std::string::npos) << r.out;  // the peak, after warm-up
  EXPECT_NE(r.out.find("lr 2.00e-04"), std::string::npos) << r.out;  // step 6: 1e-3 * 1 / 5
  const CliRun info = run_qkv("info " + d + "/a");
  EXPECT_NE(info.out.find("linear lr 0.001 warmup 2 to 0 at step 6"), std::string::npos) << info.out;
  const CliRun no_steps = run_qkv("train --src " + d + "/x --tgt " + d + "/y --output-dir " + d + "/b --schedule cosine");
  EXPECT_EQ(no_steps.code, 1) << no_steps.out;
  EXPECT_NE(no_steps.out.find("give --steps, or --time-budget"), std::string::npos) << no_steps.out;
  fs::remove_all(d);
}

// --share-all-embeddings makes one matrix of the three embeddings; qkv info says so; a resume that
// asks for it on a checkpoint without it, and a decoder-only run with it, are refused by name.
TEST(TrainCli, ShareAllEmbeddingsTiesTheThreeTablesAndInfoShowsIt) {
  const std::string d = temp_dir("share");
  CliRun r = qkv_train(kTiny + "--share-all-embeddings --steps 3 --output-dir " + d + "/a");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json config = nlohmann::json::parse(read_file(d + "/a/config.json"));
  EXPECT_TRUE(config["share_embeddings"].get<bool>());
  EXPECT_TRUE(config["tie_output_embedding"].get<bool>());
  CliRun info = run_qkv("info " + d + "/a");
  EXPECT_NE(info.out.find("tied output yes, shared source/target embeddings yes"), std::string::npos) << info.out;
  ASSERT_EQ(qkv_train(kTiny + "--steps 3 --output-dir " + d + "/b").code, 0);
  info = run_qkv("info " + d + "/b");
  EXPECT_NE(info.out.find("tied output no, shared source/target embeddings no"), std::string::npos) << info.out;
  r = qkv_train(kTiny + "--share-all-embeddings --steps 4 --resume " + d + "/b");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--resume: --share-all-embeddings, but the checkpoint's embeddings are not all shared"),
            std::string::npos)
      << r.out;
  r = qkv_train("--arch decoder-only --text " + d + "/none.txt --share-all-embeddings --output-dir " + d + "/lm");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--share-all-embeddings: a decoder-only model has one token embedding already"),
            std::string::npos)
      << r.out;
  fs::remove_all(d);
}

TEST(TrainCli, DivergenceStopsNamingTheStepAndSavesNothing) {
  const std::string d = temp_dir("nan");
  const CliRun r = qkv_train(kTiny + "--lr 1e38 --steps 50 --output-dir " + d + "/ckpt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error: step "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("training stopped without saving"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "/ckpt/model.safetensors")) << r.out;
  fs::remove_all(d);
}

TEST(TrainCli, NonsenseFlagsAreUsageErrorsNamingTheFlag) {
  const std::string d = temp_dir("flags");
  for (const std::string flag : {"--lr nan", "--lr inf", "--lr -1", "--lr 0", "--log-every 0", "--log-every -1",
                                 "--clip-norm nan", "--clip-norm -1", "--micro-batch -1", "--save-every -1",
                                 "--threads -3", "--steps -1", "--max-seq-length 0", "--dropout 1", "--label-smoothing nan",
                                 "--warmup 0", "--batch-size 0", "--len 1", "--max-memory 2X", "--max-memory lots",
                                 "--max-memory -1G", "--max-memory 12"}) {
    const CliRun r = qkv_train(kTiny + flag + " --output-dir " + d + "/ckpt");
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_EQ(r.out.rfind("qkv: error:", 0), 0u) << flag << ": " << r.out;
    EXPECT_NE(r.out.find(flag.substr(0, flag.find(' '))), std::string::npos) << flag << ": " << r.out;
    EXPECT_FALSE(fs::exists(d + "/ckpt")) << flag;
  }
  fs::remove_all(d);
}

}  // namespace
