// `qkv train --arch encoder-only` (masked-LM pretraining, classification fine-tuning from --init
// and from scratch) and `qkv classify`, through the real binary: output formats and the errors
// for bad labelled input.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace qkv::testing {
namespace {

const char* kWords[] = {"the", "light", "was", "good", "and", "God", "divided", "waters", "from", "earth"};

std::string write_text(const std::string& dir) {
  const std::string path = dir + "/text.txt";
  std::ofstream f(path);
  for (int i = 0; i < 60; ++i) {
    for (int j = 0; j < 6 + i % 5; ++j) f << kWords[(i * 3 + j * 7) % 10] << " ";
    f << "number " << i << ".\n";
  }
  return path;
}

// label<TAB>text lines: the label is the first word's group.
std::string write_labelled(const std::string& path, int n) {
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    const int w = (i * 7) % 10;
    f << (w < 5 ? "low" : "high") << "\t" << kWords[w] << " " << kWords[(i * 3) % 10] << " " << kWords[(i + 4) % 10]
      << " number " << i << ".\n";
  }
  return path;
}

class EncoderTrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("encoder_cli"));
    const std::string text = write_text(*dir_);
    const std::string labelled = write_labelled(*dir_ + "/train.tsv", 40);
    write_labelled(*dir_ + "/dev.tsv", 12);
    const std::string model = " --spm-vocab 300 --d-model 16 --heads 2 --layers 1 --d-ff 32 --threads 1";
    mlm_ = new CliRun(run_qkv("train --arch encoder-only --objective mlm --text " + text + " --valid-text " + text +
                              " --output-dir " + *dir_ + "/mlm --block-size 16 --batch-size 4 --steps 4 --valid-every 2 --log-every 2" +
                              model));
    cls_ = new CliRun(run_qkv("train --arch encoder-only --objective classify --labelled " + labelled +
                              " --valid-labelled " + *dir_ + "/dev.tsv --init " + *dir_ + "/mlm/last --output-dir " + *dir_ +
                              "/cls --block-size 16 --batch-size 4 --steps 4 --valid-every 2 --log-every 2 --lr 1e-3 --threads 1"));
  }
  static std::string* dir_;
  static CliRun* mlm_;
  static CliRun* cls_;
};
std::string* EncoderTrainCli::dir_ = nullptr;
CliRun* EncoderTrainCli::mlm_ = nullptr;
CliRun* EncoderTrainCli::cls_ = nullptr;

TEST_F(EncoderTrainCli, MaskedLmPretrainingValidatesWithAccuracyAndSavesItsVocabulary) {
  ASSERT_EQ(mlm_->code, 0) << mlm_->out;
  EXPECT_NE(mlm_->out.find("blocks of 16"), std::string::npos) << mlm_->out;
  EXPECT_NE(mlm_->out.find("15% of tokens masked"), std::string::npos) << mlm_->out;
  EXPECT_NE(mlm_->out.find("validation step 4: dev loss "), std::string::npos) << mlm_->out;
  EXPECT_NE(mlm_->out.find("accuracy "), std::string::npos) << mlm_->out;
  const std::string config = read_file(*dir_ + "/mlm/last/config.json");
  for (const char* field : {"\"cls_id\": 4", "\"sep_id\": 5", "\"mask_id\": 6", "\"pad_id\": 0", "\"encoder-only\""})
    EXPECT_NE(config.find(field), std::string::npos) << field << "\n" << config;
  EXPECT_TRUE(std::ifstream(*dir_ + "/mlm/last/spm.model").good());
  const CliRun info = run_qkv("info " + *dir_ + "/mlm/last");
  EXPECT_NE(info.out.find("masked-lm, step 4"), std::string::npos) << info.out;
}

TEST_F(EncoderTrainCli, FineTuningFromInitReportsAccuracyAndMacroF1) {
  ASSERT_EQ(cls_->code, 0) << cls_->out;
  EXPECT_NE(cls_->out.find("40 sentences, 2 labels"), std::string::npos) << cls_->out;
  EXPECT_NE(cls_->out.find("macro-F1 "), std::string::npos) << cls_->out;
  const std::string config = read_file(*dir_ + "/cls/best/config.json");
  const size_t labels = config.find("\"labels\": ["), high = config.find("\"high\""), low = config.find("\"low\"");
  ASSERT_NE(labels, std::string::npos) << config;
  EXPECT_TRUE(labels < high && high < low && low != std::string::npos) << "sorted labels\n" << config;
  EXPECT_NE(config.find("\"mlm_head\": false"), std::string::npos) << config;
  EXPECT_TRUE(std::ifstream(*dir_ + "/cls/best/spm.model").good());
  const CliRun info = run_qkv("info " + *dir_ + "/cls/last");
  EXPECT_NE(info.out.find("classification, step 4"), std::string::npos) << info.out;
}

// The PNG's height in pixels (its IHDR chunk), or -1 when the file is not a PNG.
int64_t png_height(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 24 || bytes.substr(1, 3) != "PNG") return -1;
  int64_t h = 0;
  for (int i = 20; i < 24; ++i) h = h * 256 + static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return h;
}

TEST_F(EncoderTrainCli, FineTuningLogsTheDevConfusionCountsThatQkvPlotDraws) {
  ASSERT_EQ(cls_->code, 0) << cls_->out;
  int64_t low = 0;  // dev.tsv: 12 lines, "low" where (i * 7) % 10 < 5 (write_labelled)
  for (int i = 0; i < 12; ++i) low += (i * 7) % 10 < 5;
  std::ifstream metrics(*dir_ + "/cls/metrics.jsonl");
  int validations = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["event"] != "validation") continue;
    ++validations;
    ASSERT_EQ(j["labels"], nlohmann::json({"high", "low"})) << line;
    const auto c = j["confusion"].get<std::vector<std::vector<int64_t>>>();  // [gold][predicted]
    ASSERT_EQ(c.size(), 2u) << line;
    EXPECT_EQ(c[0][0] + c[0][1], 12 - low) << line;
    EXPECT_EQ(c[1][0] + c[1][1], low) << line;
    // The logged scores are the counts': accuracy the diagonal, macro-F1 the mean of 2 TP / (predicted + gold).
    double f1 = 0;
    int present = 0;
    for (size_t l = 0; l < 2; ++l) {
      const int64_t predicted = c[0][l] + c[1][l], gold = c[l][0] + c[l][1];
      if (predicted + gold == 0) continue;
      ++present;
      f1 += 2.0 * static_cast<double>(c[l][l]) / static_cast<double>(predicted + gold);
    }
    EXPECT_NEAR(j["accuracy"].get<double>(), static_cast<double>(c[0][0] + c[1][1]) / 12, 1e-12) << line;
    EXPECT_NEAR(j["macro_f1"].get<double>(), f1 / present, 1e-12) << line;
  }
  EXPECT_EQ(validations, 2);  // steps 2 and 4
  // `qkv plot` adds the confusion matrix and per-label F1 below the curves: a 4-row picture.
  const CliRun plot = run_qkv("plot " + *dir_ + "/cls -o " + *dir_ + "/cls.png");
  ASSERT_EQ(plot.code, 0) << plot.out;
  EXPECT_EQ(png_height(*dir_ + "/cls.png"), 1550) << plot.out;
  const CliRun mlm_plot = run_qkv("plot " + *dir_ + "/mlm -o " + *dir_ + "/mlm.png");
  ASSERT_EQ(mlm_plot.code, 0) << mlm_plot.out;
  EXPECT_EQ(png_height(*dir_ + "/mlm.png"), 1150) << "no classifier, no matrix";
}

TEST_F(EncoderTrainCli, ClassifyPrintsALabelAndItsProbabilityPerLine) {
  ASSERT_EQ(cls_->code, 0) << cls_->out;
  const std::string input = *dir_ + "/input.txt";
  std::ofstream(input) << "the light was good\n\nGod divided the waters from the earth and the light\n";
  const CliRun r = run_qkv_split("classify --checkpoint " + *dir_ + "/cls/best --input " + input + " --batch-size 2");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string label = line.substr(0, tab);
    EXPECT_TRUE(label == "high" || label == "low") << line;
    const double p = std::stod(line.substr(tab + 1));
    EXPECT_GE(p, 0.5) << line;  // the most probable of two labels
    EXPECT_LE(p, 1.0) << line;
  }
  EXPECT_EQ(n, 3);  // one line per input line, the empty one included
  // Progress on stderr (not a terminal: the last line), the lines themselves on stdout or in -o FILE.
  EXPECT_NE(r.err.find("classified 3/3 sentences, "), std::string::npos) << r.err;
  const CliRun to_file = run_qkv_split("classify --checkpoint " + *dir_ + "/cls/best --input " + input +
                                       " --batch-size 2 --quiet -o " + *dir_ + "/classes.txt");
  ASSERT_EQ(to_file.code, 0) << to_file.err;
  EXPECT_EQ(to_file.out + to_file.err, "");
  EXPECT_EQ(qkv::testing::read_file(*dir_ + "/classes.txt"), r.out);
  const CliRun top = run_qkv_split("classify --checkpoint " + *dir_ + "/cls/best --input " + input + " --top-k 2");
  ASSERT_EQ(top.code, 0) << top.err;
  const std::string first = top.out.substr(0, top.out.find('\n'));
  EXPECT_EQ(std::count(first.begin(), first.end(), '\t'), 3) << first;  // label p label p
  const CliRun no_head = run_qkv("classify --checkpoint " + *dir_ + "/mlm/last --input " + input);
  EXPECT_EQ(no_head.code, 1) << no_head.out;
  EXPECT_NE(no_head.out.find("no classification head"), std::string::npos) << no_head.out;
  const CliRun too_long = run_qkv("classify --checkpoint " + *dir_ + "/cls/best --input " + input +
                                  " --too-long error --max-input-length 4");
  EXPECT_EQ(too_long.code, 1) << too_long.out;
  EXPECT_NE(too_long.out.find("input.txt:1:"), std::string::npos) << too_long.out;
}

TEST_F(EncoderTrainCli, BadLabelledInputIsRefusedNamingFileAndLine) {
  const std::string train = *dir_ + "/train.tsv";
  const auto classify = [&](const std::string& extra) {
    return run_qkv("train --arch encoder-only --objective classify --labelled " + train + " --output-dir " + *dir_ +
                   "/bad --spm-vocab 300 --d-model 16 --heads 2 --layers 1 --d-ff 32 --block-size 16 --steps 1 "
                   "--threads 1" + extra);
  };
  std::ofstream(*dir_ + "/unseen.tsv") << "low\tthe light\nhigh\tthe earth\nmiddle\twaters\n";
  const CliRun unseen = classify(" --valid-labelled " + *dir_ + "/unseen.tsv");
  EXPECT_EQ(unseen.code, 1) << unseen.out;
  EXPECT_NE(unseen.out.find("unseen.tsv:3: label 'middle' is not one of"), std::string::npos) << unseen.out;
  std::ofstream(*dir_ + "/notab.tsv") << "low\tthe light\nthe earth without a label\n";
  const CliRun notab = classify(" --valid-labelled " + *dir_ + "/notab.tsv");
  EXPECT_EQ(notab.code, 1) << notab.out;
  EXPECT_NE(notab.out.find("notab.tsv:2: no TAB"), std::string::npos) << notab.out;
  std::ofstream(*dir_ + "/one.tsv") << "low\tthe light\nlow\tthe earth\n";
  const CliRun one = run_qkv("train --arch encoder-only --objective classify --labelled " + *dir_ + "/one.tsv --output-dir " +
                             *dir_ + "/bad1 --steps 1");
  EXPECT_EQ(one.code, 1) << one.out;
  EXPECT_NE(one.out.find("a classifier needs at least two labels"), std::string::npos) << one.out;
  // A decoder-only checkpoint cannot start a classifier.
  const CliRun lm = run_qkv("train --arch decoder-only --text " + *dir_ + "/text.txt --output-dir " + *dir_ +
                            "/gpt --spm-vocab 300 --d-model 8 --heads 2 --layers 1 --d-ff 16 --block-size 8 --steps 1 "
                            "--threads 1");
  ASSERT_EQ(lm.code, 0) << lm.out;
  const CliRun gpt = run_qkv("train --arch encoder-only --objective classify --labelled " + train + " --init " + *dir_ +
                             "/gpt/last --output-dir " + *dir_ + "/bad2 --steps 1");
  EXPECT_EQ(gpt.code, 1) << gpt.out;
  EXPECT_NE(gpt.out.find("decoder-only checkpoint"), std::string::npos) << gpt.out;
  EXPECT_NE(gpt.out.find("encoder-only model"), std::string::npos) << gpt.out;
  // From scratch (no --init): a vocabulary of its own, and it trains.
  const CliRun scratch = classify("");
  EXPECT_EQ(scratch.code, 0) << scratch.out;
  EXPECT_TRUE(std::ifstream(*dir_ + "/bad/last/spm.model").good());
}

TEST_F(EncoderTrainCli, FlagsOfTheWrongObjectiveAreRefused) {
  const std::string train = *dir_ + "/train.tsv";
  const CliRun no_objective = run_qkv("train --arch encoder-only --text " + train + " --output-dir " + *dir_ + "/x");
  EXPECT_EQ(no_objective.code, 2) << no_objective.out;
  EXPECT_NE(no_objective.out.find("needs --objective mlm"), std::string::npos) << no_objective.out;
  const CliRun labelled_lm = run_qkv("train --labelled " + train + " --output-dir " + *dir_ + "/x");
  EXPECT_EQ(labelled_lm.code, 2) << labelled_lm.out;
  EXPECT_NE(labelled_lm.out.find("add --arch encoder-only --objective classify"), std::string::npos) << labelled_lm.out;
  const CliRun mixed = run_qkv("train --arch encoder-only --objective mlm --text " + train + " --labelled " + train +
                               " --output-dir " + *dir_ + "/x");
  EXPECT_EQ(mixed.code, 2) << mixed.out;
  const CliRun bad = run_qkv("train --arch encoder-only --objective nsp --text " + train);
  EXPECT_EQ(bad.code, 2) << bad.out;
}

}  // namespace
}  // namespace qkv::testing
