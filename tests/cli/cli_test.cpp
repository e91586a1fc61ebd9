// The `qkv` binary as a user runs it: exit codes, the last line of `score`, error messages naming
// file and line, train -> translate round trips (ids and text), and Ctrl-C during corpus training.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/cli_util.h"
#include "data/toy_corpus.h"
#include "model/ref_dir.h"

namespace {
namespace fs = std::filesystem;

using qkv::testing::CliRun;
using qkv::testing::read_file;
using qkv::testing::temp_dir;

CliRun qkv(const std::string& args) { return qkv::testing::run_qkv(args); }

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

int count_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

TEST(Cli, VersionAndHelp) {
  EXPECT_EQ(qkv("--version").code, 0);
  EXPECT_NE(qkv("--version").out.find("qkv "), std::string::npos);
  const CliRun help = qkv("--help");
  EXPECT_EQ(help.code, 0);
  for (const char* cmd : {"train", "translate", "score", "init", "bleu", "chrf"})
    EXPECT_NE(help.out.find(cmd), std::string::npos) << cmd;
}

TEST(Cli, ScoreMatchesPyTorchOnTheLastLine) {
  const std::string dir = qkv::testing::ref_path("model_small_score"), model = qkv::testing::ref_path("model_small");
  if (dir.empty() || model.empty()) return;
  // stdout alone: the progress line goes to stderr
  const CliRun r = qkv::testing::run_qkv_split("score --checkpoint " + model + " --src " + dir + "/src.txt --tgt " + dir +
                                               "/tgt.txt --per-line");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const std::string last = last_line(r.out);
  ASSERT_EQ(last.rfind("loss ", 0), 0u) << last;
  const double want = expected["mean_loss"].get<double>();
  EXPECT_NEAR(std::stod(last.substr(5)), want, 1e-5 * want);
  std::istringstream lines(r.out);
  std::string line;
  for (const auto& v : expected["per_line"]) {  // per-line sums come first, in order
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_NEAR(std::stod(line), v.get<double>(), 1e-4 * std::fabs(v.get<double>()) + 1e-4);
  }
}

TEST(Cli, BadInputNamesFileAndLineAndExitsNonZero) {
  const std::string model = qkv::testing::ref_path("model_small");
  if (model.empty()) return;
  const std::string d = temp_dir("bad");
  std::ofstream(d + "/src.txt") << "1 2 3\n4 x 6\n";
  std::ofstream(d + "/tgt.txt") << "1 2\n3 4\n";
  CliRun r = qkv("score --checkpoint " + model + " --src " + d + "/src.txt --tgt " + d + "/tgt.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("src.txt:2: 'x' is not a token id"), std::string::npos) << r.out;
  std::ofstream(d + "/src2.txt") << "1 2 3\n4 99999 6\n";
  r = qkv("score --checkpoint " + model + " --src " + d + "/src2.txt --tgt " + d + "/tgt.txt");
  EXPECT_NE(r.out.find("src2.txt:2: id 99999 out of range for vocabulary size 37"), std::string::npos) << r.out;
  std::ofstream(d + "/short.txt") << "1 2 3\n";
  r = qkv("score --checkpoint " + model + " --src " + d + "/short.txt --tgt " + d + "/tgt.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("has 1 lines but"), std::string::npos) << r.out;
  r = qkv("score --checkpoint " + d + "/missing --src " + d + "/src.txt --tgt " + d + "/tgt.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("missing: checkpoint directory does not exist"), std::string::npos) << r.out;
  std::ofstream(d + "/config.json") << "{\"d_model\": 30, \"num_heads\": 4}";
  r = qkv("init --config " + d + "/config.json --output-dir " + d + "/ckpt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("d_model 30 must be divisible by num_heads 4"), std::string::npos) << r.out;
  r = qkv("train");
  EXPECT_EQ(r.code, 2) << "a missing data flag is a usage error";
  EXPECT_NE(r.out.find("nothing to train on"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(Cli, TrainThenTranslateIds) {
  const std::string d = temp_dir("roundtrip");
  // 500 steps: at 300 the 6-token line copied in the release build but not in the ASan build (-O1,
  // AVX2 kernels) on a CPU without AVX-512, whose training took another path (-5.4 for the best beam).
  CliRun r = qkv("train --synthetic --preset tiny --steps 500 --threads 1 --log-every 100 --output-dir " + d + "/ckpt");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 500/500"), std::string::npos) << r.out;
  // --quiet: the same run says nothing, and still writes its checkpoint.
  const CliRun quiet = qkv::testing::run_qkv_split("train --synthetic --preset tiny --steps 3 --threads 1 --quiet --output-dir " +
                                                   d + "/quiet");
  EXPECT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, "");
  EXPECT_TRUE(fs::exists(d + "/quiet/config.json"));
  std::ofstream(d + "/in.txt") << "5 6 7 8 9\n\n10 11 12 13 14 15\n";
  r = qkv("translate --checkpoint " + d + "/ckpt --ids --beam-size 3 --threads 1 --input " + d + "/in.txt --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "5 6 7 8 9\n\n10 11 12 13 14 15\n");  // the copy task, empty line kept
  r = qkv("translate --checkpoint " + d + "/ckpt --ids --beam-size 3 --num-hypotheses 2 --threads 1 --input " + d + "/in.txt --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 ||| 5 6 7 8 9 ||| "), std::string::npos) << r.out;
  std::string long_line;
  for (int i = 0; i < 40; ++i) {  // max_seq_length is 32
    if (i) long_line += ' ';
    long_line += std::to_string(4 + i % 20);
  }
  std::ofstream(d + "/long.txt") << long_line << "\n";
  r = qkv("translate --checkpoint " + d + "/ckpt --ids --too-long error --threads 1 --input " + d + "/long.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("long.txt:1: 40 tokens exceed the model's max_seq_length 32"), std::string::npos) << r.out;
  r = qkv("translate --checkpoint " + d + "/ckpt --ids --threads 1 --input " + d + "/long.txt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 sentence(s) longer than 32 tokens were truncated"), std::string::npos) << r.out;
  r = qkv("translate --checkpoint " + d + "/ckpt --threads 1 --input " + d + "/in.txt");
  EXPECT_EQ(r.code, 1);  // no SentencePiece models in a synthetic checkpoint
  EXPECT_NE(r.out.find("use --ids"), std::string::npos) << r.out;
  fs::remove_all(d);
}

// Corpus training as a user runs it: Ctrl-C saves DIR/last and exits 130, --resume continues from
// the saved step, and `qkv translate` turns raw text into text with the checkpoint's SentencePiece
// model (an empty line stays empty, invalid UTF-8 is refused naming file and line).
TEST(Cli, CorpusTrainInterruptedResumedThenTranslatesText) {
  const std::string d = temp_dir("corpus");
  qkv::testing::write_toy_corpus(d + "/data", 300, 5);
  const std::string base = "train --src " + d + "/data/train.es --tgt " + d + "/data/train.en --valid-src " + d +
                            "/data/dev.es --valid-tgt " + d + "/data/dev.en --output-dir " + d +
                            "/run --spm-vocab 300 --heads 4 --layers 1 --d-ff 64 --max-seq-length 64"
                            " --max-batch-tokens 400 --warmup 5 --lr 1e-3 --threads 1 --log-every 1 --valid-every 25"
                            " --valid-bleu-sentences 5";
  const std::string flags = base + " --d-model 32 --time-budget 1h5m";
  const int status = qkv::testing::interrupt_at_step(flags + " --steps 1000000", d + "/log", 3);
  ASSERT_NE(status, -1) << read_file(d + "/log");
  const std::string log = read_file(d + "/log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_NE(log.find("qkv train: interrupted at step "), std::string::npos) << log;
  std::ifstream state_file(d + "/run/last/train_state.json");
  ASSERT_TRUE(state_file.good()) << log;
  const int64_t stopped_at = nlohmann::json::parse(state_file)["step"].get<int64_t>();
  EXPECT_GE(stopped_at, 3);

  const std::string until = std::to_string(stopped_at + 3);
  CliRun r = qkv(flags + " --steps " + until + " --resume " + d + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("\nstep " + std::to_string(stopped_at) + "/"), std::string::npos) << r.out;  // no step redone
  EXPECT_NE(r.out.find("\nstep " + until + "/"), std::string::npos) << r.out;
  r = qkv(base + " --steps " + until + " --resume " + d + "/run --d-model 64");  // an incompatible model
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--d-model 64 differs from the checkpoint's 32"), std::string::npos) << r.out;

  std::istringstream dev(read_file(d + "/data/dev.es"));
  std::string input, line;
  for (int i = 0; i < 3 && std::getline(dev, line); ++i) input += line + "\n";
  input += "\nla me\n";  // an empty line, then a short one
  std::ofstream(d + "/in.es") << input;
  r = qkv("translate --checkpoint " + d + "/run/last --beam-size 2 --threads 1 --input " + d + "/in.es --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_lines(r.out), 5) << r.out;
  EXPECT_NE(r.out.find("\n\n"), std::string::npos) << r.out;  // the empty input line
  r = qkv("translate --checkpoint " + d + "/run/last --beam-size 2 --threads 1 --input " + d + "/in.es");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("qkv translate: 4 sentences"), std::string::npos) << r.out;

  std::ofstream(d + "/bad.es") << "la me\nti \xff sa\n";
  r = qkv("translate --checkpoint " + d + "/run/last --threads 1 --input " + d + "/bad.es");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad.es:2: invalid UTF-8"), std::string::npos) << r.out;
  r = qkv(base + " --time-budget 1h5x");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--time-budget: duration '1h5x'"), std::string::npos) << r.out;
  fs::remove_all(d);
}

}  // namespace
