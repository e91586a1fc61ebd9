// `qkv train --arch decoder-only`, `qkv score` of a language model and `qkv translate` refusing
// one, run through the real binary.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace qkv::testing {
namespace {

// A small text: 60 varied lines (numbers spelled differently so the vocabulary has some work).
std::string write_text(const std::string& dir) {
  const std::string path = dir + "/text.txt";
  std::ofstream f(path);
  const char* words[] = {"the", "light", "was", "good", "and", "God", "divided", "waters", "from", "earth"};
  for (int i = 0; i < 60; ++i) {
    for (int j = 0; j < 6 + i % 5; ++j) f << words[(i * 3 + j * 7) % 10] << (j % 4 == 3 ? ", " : " ");
    f << "number " << i << ".\n";
  }
  return path;
}

class LmCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("lm_cli"));
    text_ = new std::string(write_text(*dir_));
    run_ = new CliRun(run_qkv("train --arch decoder-only --text " + *text_ + " --valid-text " + *text_ + " --output-dir " +
                              *dir_ + "/run --spm-vocab 300 --d-model 16 --heads 2 --layers 1 --d-ff 32 --block-size 16 "
                                      "--batch-size 4 --steps 6 --valid-every 3 --log-every 3 --threads 1"));
  }
  static std::string* dir_;
  static std::string* text_;
  static CliRun* run_;
};
std::string* LmCli::dir_ = nullptr;
std::string* LmCli::text_ = nullptr;
CliRun* LmCli::run_ = nullptr;

TEST_F(LmCli, TrainsValidatesWithPerplexityAndSavesACheckpointWithItsVocabulary) {
  ASSERT_EQ(run_->code, 0) << run_->out;
  EXPECT_NE(run_->out.find("blocks of 16"), std::string::npos) << run_->out;
  EXPECT_NE(run_->out.find("ppl "), std::string::npos) << run_->out;
  for (const char* f : {"/run/last/config.json", "/run/last/spm.model", "/run/best/model.safetensors"})
    EXPECT_TRUE(std::ifstream(*dir_ + f).good()) << f;
  const CliRun info = run_qkv("info " + *dir_ + "/run/last");
  EXPECT_NE(info.out.find("architecture  decoder-only"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("language-model, step 6"), std::string::npos) << info.out;
}

// metrics.jsonl: one line per progress report and per validation, what the progress line says.
TEST_F(LmCli, WritesEveryReportToMetricsJsonl) {
  ASSERT_EQ(run_->code, 0) << run_->out;
  std::ifstream in(*dir_ + "/run/metrics.jsonl");
  ASSERT_TRUE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // --steps 6 --log-every 3 --valid-every 3: steps 3 and 6, validations at 3 and 6.
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].find("{\"event\":\"step\",\"step\":3,"), 0u) << lines[0];
  EXPECT_NE(lines[1].find("\"event\":\"validation\""), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"perplexity\":"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("\"step\":6"), std::string::npos) << lines[3];
}

TEST_F(LmCli, ScoresLinesWithoutASourceAndRefusesOne) {
  ASSERT_EQ(run_->code, 0) << run_->out;
  const std::string ids = *dir_ + "/ids.txt";
  std::ofstream(ids) << "3 5 6 7\n3 9\n";
  const CliRun r = run_qkv("score --checkpoint " + *dir_ + "/run/last --tgt " + ids + " --per-line");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("perplexity "), std::string::npos) << r.out;
  const CliRun with_src = run_qkv("score --checkpoint " + *dir_ + "/run/last --src " + ids + " --tgt " + ids);
  EXPECT_EQ(with_src.code, 2) << with_src.out;
  EXPECT_NE(with_src.out.find("is a decoder-only model, which scores --tgt lines alone"), std::string::npos)
      << with_src.out;
}

// `score --text` reads text as validation does (same blocks, every token once): on the validation
// text with the final weights it prints the final validation loss.
TEST_F(LmCli, ScoreTextEqualsTheLastValidationLoss) {
  ASSERT_EQ(run_->code, 0) << run_->out;
  const size_t at = run_->out.rfind("validation step 6: dev loss ");
  ASSERT_NE(at, std::string::npos) << run_->out;
  const double validation = std::stod(run_->out.substr(at + 28));  // printed with 4 decimals
  const CliRun r = run_qkv("score --checkpoint " + *dir_ + "/run/last --text " + *text_);
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t loss_at = r.out.find("\nloss ");
  ASSERT_NE(loss_at, std::string::npos) << r.out;
  EXPECT_NEAR(std::stod(r.out.substr(loss_at + 6)), validation, 5e-5) << r.out;
  EXPECT_NE(r.out.find("perplexity "), std::string::npos) << r.out;
  const CliRun both = run_qkv("score --checkpoint " + *dir_ + "/run/last --text " + *text_ + " --tgt " + *text_);
  EXPECT_EQ(both.code, 2) << both.out;
}

TEST_F(LmCli, TranslateRefusesALanguageModelNamingBothArchitectures) {
  ASSERT_EQ(run_->code, 0) << run_->out;
  const CliRun r = run_qkv("translate --checkpoint " + *dir_ + "/run/last --input " + *text_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decoder-only checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("encoder-decoder model"), std::string::npos) << r.out;
}

// --preset names the model's sizes for text runs too; size flags given as well override them.
TEST_F(LmCli, APresetSizesTheModelAndFlagsOverrideIt) {
  const auto config_of = [&](const std::string& name, const std::string& flags) {
    const CliRun r = run_qkv("train --arch decoder-only --text " + *text_ + " --output-dir " + *dir_ + "/" + name +
                             " --spm-vocab 300 --block-size 16 --batch-size 4 --steps 1 --threads 1 " + flags);
    EXPECT_EQ(r.code, 0) << r.out;
    return read_file(*dir_ + "/" + name + "/last/config.json");
  };
  const std::string tiny = config_of("tiny", "--preset tiny");
  for (const std::string field : {"\"d_model\": 64", "\"num_heads\": 4", "\"num_layers\": 2", "\"d_ff\": 256"})
    EXPECT_NE(tiny.find(field), std::string::npos) << field << " in " << tiny;
  const std::string wider = config_of("tiny3", "--preset tiny --layers 3");
  EXPECT_NE(wider.find("\"num_layers\": 3"), std::string::npos) << wider;
  EXPECT_NE(wider.find("\"d_model\": 64"), std::string::npos) << wider;
  // seed is the synthetic example's; small, base and big are not synthetic ones.
  const CliRun seed = run_qkv("train --arch decoder-only --text " + *text_ + " --preset seed --output-dir " + *dir_ + "/s");
  EXPECT_EQ(seed.code, 2) << seed.out;
  EXPECT_NE(seed.out.find("--preset seed is for --synthetic"), std::string::npos) << seed.out;
  const CliRun small = run_qkv("train --synthetic --preset small --steps 1");
  EXPECT_EQ(small.code, 2) << small.out;
  EXPECT_NE(small.out.find("--synthetic takes seed or tiny"), std::string::npos) << small.out;
  const CliRun both = run_qkv("train --arch decoder-only --text " + *text_ + " --preset tiny --config " + *dir_ +
                              "/tiny/last/config.json --output-dir " + *dir_ + "/c");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("drop --preset"), std::string::npos) << both.out;
}

TEST_F(LmCli, FlagsOfTheWrongFamilyAreRefused) {
  const CliRun no_arch = run_qkv("train --text " + *text_ + " --output-dir " + *dir_ + "/x");
  EXPECT_EQ(no_arch.code, 2) << no_arch.out;  // a usage error
  EXPECT_NE(no_arch.out.find("add --arch decoder-only"), std::string::npos) << no_arch.out;
  const CliRun mixed = run_qkv("train --arch decoder-only --text " + *text_ + " --src " + *text_ + " --output-dir " + *dir_ + "/x");
  EXPECT_NE(mixed.code, 0) << mixed.out;
  const CliRun decay = run_qkv("train --arch decoder-only --text " + *text_ + " --output-dir " + *dir_ +
                               "/x --optimizer adam --weight-decay 0.1 --steps 1");
  EXPECT_EQ(decay.code, 1) << decay.out;
  EXPECT_NE(decay.out.find("--weight-decay needs --optimizer adamw"), std::string::npos) << decay.out;
}

}  // namespace
}  // namespace qkv::testing
