// `qkv plot RUN_DIR` through the real binary: it draws a run's metrics.jsonl into a PNG with
// python3 + matplotlib (python/qkv/plot.py from the source tree); a bad record is one
// "qkv: error:" line naming the file and line (exit 1); a python3 that cannot draw is named, with
// how to install matplotlib (exit 1); python3 from PATH without matplotlib falls back to
// /usr/bin/python3; $QKV_PYTHON, when set, is the only interpreter tried.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "cli/cli_util.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::kBadInput;
using qkv::testing::kUsage;


// `env ENV qkv ARGS 2>&1`: stdout and stderr together.
CliRun run_with_env(const std::string& env, const std::string& args) {
  const std::string cmd = "env " + env + " " + std::string(QKV_BIN) + " " + args + " 2>&1 < /dev/null";
  CliRun r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The PNG signature and a size only a real picture has.
void expect_png(const std::string& path) {
  ASSERT_TRUE(fs::exists(path)) << path;
  const std::string bytes = qkv::testing::read_file(path);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << path;
  EXPECT_GT(bytes.size(), 20000u) << path;
}

class PlotCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = qkv::testing::temp_dir("plot_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    run_ = dir_ + "/run";
    fs::create_directories(run_);
    std::ofstream m(run_ + "/metrics.jsonl");
    for (int s = 1; s <= 60; ++s) {
      m << R"({"event":"step","step":)" << s << R"(,"epoch":1,"time":)" << 0.5 * s << R"(,"loss":)" << 5.0 / s + 1
        << R"(,"lr":0.0005,"grad_norm":1.2,"tokens_per_second":5000.0,"tokens":)" << 100 * s << "}\n";
      if (s % 20 == 0)
        m << R"({"event":"validation","step":)" << s << R"(,"time":)" << 0.5 * s + 1 << R"(,"loss":)" << 6.0 / s + 1.5
          << R"(,"perplexity":9.0,"bleu":)" << s / 3.0 << R"(,"best":true})" << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A python3 that runs but has no matplotlib: the system one without its site directories.
  std::string python_without_matplotlib() {
    fs::create_directories(dir_ + "/bin");
    const std::string path = dir_ + "/bin/python3";
    std::ofstream(path) << "#!/bin/sh\nexec /usr/bin/python3 -I -S \"$@\"\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  }
  std::string dir_, run_;
};

TEST_F(PlotCli, DrawsSeveralRunsOverEachOther) {
  fs::copy(run_, dir_ + "/other", fs::copy_options::recursive);
  const CliRun r = run_with_env("-u QKV_PYTHON", "plot " + run_ + " " + dir_ + "/other -o " + dir_ + "/both.png");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_png(dir_ + "/both.png");
  // Several runs need --output-dir: there is no one run directory to write into.
  const CliRun no_out = run_with_env("-u QKV_PYTHON", "plot " + run_ + " " + dir_ + "/other");
  EXPECT_EQ(no_out.code, kUsage) << no_out.out;
  EXPECT_NE(no_out.out.find("qkv: error: several runs: say where the picture goes with -o"), std::string::npos)
      << no_out.out;
}

TEST_F(PlotCli, DrawsTheCurvesOfARun) {
  const CliRun r = run_with_env("-u QKV_PYTHON", "plot " + run_ + " -o " + dir_ + "/curves.png");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "wrote " + dir_ + "/curves.png\n");
  expect_png(dir_ + "/curves.png");
  // Default: RUN_DIR/curves.png; the metrics file itself is accepted too.
  ASSERT_EQ(run_with_env("-u QKV_PYTHON", "plot " + run_).code, 0);
  expect_png(run_ + "/curves.png");
  ASSERT_EQ(run_with_env("-u QKV_PYTHON", "plot " + run_ + "/metrics.jsonl -o " + dir_ + "/m.png --title 'A run'").code, 0);
  expect_png(dir_ + "/m.png");
}

TEST_F(PlotCli, ABadRecordIsOneErrorLineNamingFileAndLine) {
  std::ofstream(run_ + "/metrics.jsonl", std::ios::app) << "{\"event\": \"step\", \"step\": 61, \"loss\": \"high\"}\n";
  const CliRun r = run_with_env("-u QKV_PYTHON", "plot " + run_ + " -o " + dir_ + "/c.png");
  qkv::testing::expect_error(r, kBadInput, {run_ + "/metrics.jsonl:64: \"loss\" must be a number, got \"high\""});
  EXPECT_EQ(r.out.find("plot.py"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(fs::exists(dir_ + "/c.png"));
  qkv::testing::expect_error(run_with_env("-u QKV_PYTHON", "plot " + dir_ + "/nowhere"), kBadInput,
                             {dir_ + "/nowhere: no such file or directory"});
  qkv::testing::expect_error(run_with_env("-u QKV_PYTHON", "plot " + dir_), kBadInput,
                             {dir_ + "/metrics.jsonl: no such file"});
}

TEST_F(PlotCli, APythonWithoutMatplotlibIsNamedWithHowToInstallIt) {
  const std::string python = python_without_matplotlib();
  const CliRun r = run_with_env("QKV_PYTHON=" + python, "plot " + run_);
  qkv::testing::expect_error(r, kBadInput, {"python3 with matplotlib", "no module named 'matplotlib'",
                                            "apt-get install python3-matplotlib", "QKV_PYTHON"});
  qkv::testing::expect_error(run_with_env("QKV_PYTHON=" + dir_ + "/missing/python3", "plot " + run_), kBadInput,
                             {"QKV_PYTHON=" + dir_ + "/missing/python3: cannot run it (No such file or directory)",
                              "apt-get install python3-matplotlib"});
}

TEST_F(PlotCli, FallsBackToTheSystemPythonWhenTheOneOnPathCannotDraw) {
  python_without_matplotlib();
  const CliRun r = run_with_env("-u QKV_PYTHON PATH=" + dir_ + "/bin:/usr/bin:/bin", "plot " + run_ + " -o " + dir_ + "/c.png");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_png(dir_ + "/c.png");
}

TEST_F(PlotCli, UsageErrors) {
  qkv::testing::expect_error(run_with_env("-u QKV_PYTHON", "plot"), kUsage, {"run is required"});
  qkv::testing::expect_error(run_with_env("-u QKV_PYTHON", "plot " + run_ + " --dpi 3"), kUsage, {"--dpi"});
}

}  // namespace
