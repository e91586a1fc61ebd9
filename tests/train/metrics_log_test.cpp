// metrics.jsonl (train/metrics_log.h): what a new, a resumed and a killed run leave in it.
#include "qkv/train/metrics_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace qkv::train {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("qkv_metrics_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

StepReport report(int64_t step) {
  StepReport r;
  r.step = step;
  r.epoch = 1;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.elapsed = static_cast<double>(step);
  return r;
}

TEST(MetricsLogFile, ANewRunStartsAfreshAtItsFirstLineAndLogsValidations) {
  const std::string path = temp_path("new.jsonl");
  std::ofstream(path) << "{\"event\":\"step\",\"step\":99}\n";
  MetricsLog log(path, -1);
  EXPECT_EQ(read_all(path), "{\"event\":\"step\",\"step\":99}\n") << "a run that never logs leaves the old file";
  log.step(report(1));
  ValidationReport v;
  v.step = 1;
  v.result.loss = 2.0;
  v.result.bleu = 12.5;
  v.best = true;
  v.elapsed = 1.5;
  log.validation(v);
  const std::string text = read_all(path);
  EXPECT_EQ(text.find("\"step\":99"), std::string::npos) << text;
  EXPECT_NE(text.find("\"event\":\"step\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"bleu\":12.5"), std::string::npos) << text;
  EXPECT_NE(text.find("\"time\":1.5"), std::string::npos) << text;
  EXPECT_EQ(text.find("accuracy"), std::string::npos) << "fields not computed are left out: " << text;
  EXPECT_EQ(text.find("confusion"), std::string::npos) << text;
}

TEST(MetricsLogFile, AClassifiersValidationLogsItsLabelsAndConfusionCounts) {
  const std::string path = temp_path("classifier.jsonl");
  MetricsLog log(path, -1);
  ValidationReport v;
  v.step = 4;
  v.result.accuracy = 0.5;
  v.result.macro_f1 = 0.25;
  v.result.labels = {"neg", "pos"};
  v.result.confusion = {{1, 1}, {1, 1}};
  log.validation(v);
  const std::string text = read_all(path);
  EXPECT_NE(text.find("\"labels\":[\"neg\",\"pos\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"confusion\":[[1,1],[1,1]]"), std::string::npos) << text;
}

TEST(MetricsLogFile, AResumedRunDropsLinesAfterItsStepAndATornLastLine) {
  const std::string path = temp_path("resume.jsonl");
  {
    MetricsLog log(path, -1);
    for (int64_t s = 1; s <= 5; ++s) log.step(report(s));
  }
  std::ofstream(path, std::ios::app) << "{\"event\":\"step\",\"st";  // killed mid-line
  MetricsLog resumed(path, 3);
  resumed.step(report(4));
  std::istringstream lines(read_all(path));
  std::vector<int64_t> steps;
  for (std::string line; std::getline(lines, line);) steps.push_back(std::stoll(line.substr(line.find("\"step\":") + 7)));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(MetricsLogFile, WrapLogsBeforeTheCallersCallbacks) {
  const std::string path = temp_path("wrap.jsonl");
  MetricsLog log(path, -1);
  int calls = 0;
  TrainerEvents events;
  events.on_log = [&](const StepReport&) {
    ++calls;
    EXPECT_NE(read_all(path).find("\"step\":7"), std::string::npos);
  };
  log.wrap(events).on_log(report(7));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace qkv::train
