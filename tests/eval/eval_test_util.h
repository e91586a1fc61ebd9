// Shared harness of the BLEU and chrF tests: reference cases written by
// tests/python/make_bleu_refs.py, tolerant comparisons, and running the qkv binary.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/ref_dir.h"
#include "qkv/eval/bleu.h"

namespace qkv_eval_test {

namespace fs = std::filesystem;
using nlohmann::json;

inline json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  return in ? json::parse(in) : json();
}

// Cases written by make_bleu_refs.py: DIR/bleu/cases.json and one folder per case.
struct RefCase {
  std::string name, dir;
  json expected;
  std::vector<std::string> ref_files;
};

inline std::vector<RefCase> load_cases() {
  const std::string index = qkv::testing::ref_path("bleu/cases.json");
  if (index.empty() || !fs::exists(index)) return {};
  const std::string root = fs::path(index).parent_path().string();
  std::vector<RefCase> cases;
  const json index_json = load_json(index);
  for (const auto& name : index_json["cases"]) {
    RefCase c;
    c.name = name.get<std::string>();
    c.dir = root + "/" + c.name;
    c.expected = load_json(c.dir + "/expected.json");
    for (int k = 0; k < c.expected["num_refs"].get<int>(); ++k)
      c.ref_files.push_back(c.dir + "/ref" + std::to_string(k) + ".txt");
    cases.push_back(std::move(c));
  }
  EXPECT_GE(cases.size(), 40u);
  return cases;
}

inline void expect_close(double got, double want, const char* what) {
  if (want == 0.0)
    EXPECT_EQ(got, 0.0) << what;
  else
    EXPECT_NEAR(got, want, 1e-9 * std::fabs(want)) << what;
}

// sacreBLEU's JSON names its own version; ours names kSacrebleuVersion.
inline std::string with_our_version(std::string s, const std::string& theirs) {
  for (const std::string& key : {std::string("version:"), std::string("\"version\": \"")}) {
    const std::string from = key + theirs, to = key + qkv::eval::kSacrebleuVersion;
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  }
  return s;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  q.append(s);
  q.push_back('\'');
  return q;
}

struct ProcResult {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command; `output` is its standard output (and standard error with merge_stderr).
inline ProcResult run_cmd(const std::string& command, bool merge_stderr) {
  ProcResult r;
  FILE* p = popen((command + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string qkv_command(const std::string& sub, const std::vector<std::string>& refs, const std::string& args = "") {
  std::string cmd = quote(QKV_BIN);
  cmd.push_back(' ');
  cmd.append(sub);
  for (const auto& r : refs) {
    cmd.push_back(' ');
    cmd.append(quote(r));
  }
  if (!args.empty()) {
    cmd.push_back(' ');
    cmd.append(args);
  }
  return cmd;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("qkv_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
};


}  // namespace qkv_eval_test
