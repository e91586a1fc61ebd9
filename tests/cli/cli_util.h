// Running the real `qkv` binary (QKV_BIN) from tests: its exit status and output.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <chrono>
#include <string>
#include <vector>
#include <thread>

#include "file_bytes.h"

namespace qkv::testing {

// qkv's exit codes for bad input and for a usage error (docs/cli.md, "Exit codes").
inline constexpr int kBadInput = 1;
inline constexpr int kUsage = 2;

struct CliRun {
  int code = -1;    // exit status; -1 if killed by a signal
  std::string out;  // stdout (and stderr, for run_qkv)
  std::string err;  // stderr (run_qkv_split only)
};

inline std::string read_file(const std::string& path) { return test_support::file_bytes(path); }

// `text` split at newlines, without them (a last line without one still counts).
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs `sh -c "QKV_BIN args <redirect>"` and collects what it writes to stdout. With a time limit
// qkv runs under timeout(1), which kills it and exits 124 when the limit passes.
inline CliRun run_shell(const std::string& args, const std::string& redirect, int time_limit_s = 0) {
  const std::string limit = time_limit_s > 0 ? "timeout -k 5 " + std::to_string(time_limit_s) + " " : "";
  const std::string cmd = limit + std::string(QKV_BIN) + " " + args + " " + redirect;
  CliRun r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `qkv args` with stdout and stderr together in `out`.
inline CliRun run_qkv(const std::string& args) { return run_shell(args, "2>&1"); }

// `qkv args < /dev/null` with stdout in `out` and stderr in `err`, killed after `time_limit_s`.
inline CliRun run_qkv_split(const std::string& args, int time_limit_s = 120) {
  const std::string err_path =
      ::testing::TempDir() + "/qkv_cli_stderr_" + std::to_string(::getpid()) + ".txt";
  CliRun r = run_shell(args, "< /dev/null 2>" + err_path, time_limit_s);
  r.err = read_file(err_path);
  std::filesystem::remove(err_path);
  return r;
}

// Starts `qkv args > log 2>&1`, waits until the log shows progress line "step N/", sends SIGINT and
// returns the wait status of qkv (-1 if it could not be started or never got that far).
inline int interrupt_at_step(const std::string& args, const std::string& log, int step) {
  const std::string cmd = "exec " + std::string(QKV_BIN) + " " + args + " > " + log + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) return -1;
  const std::string marker = "\nstep " + std::to_string(step) + "/";
  for (int i = 0; i < 600 && read_file(log).find(marker) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool reached = read_file(log).find(marker) != std::string::npos;
  ::kill(pid, reached ? SIGINT : SIGKILL);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !reached) return -1;
  return status;
}

// A fresh, empty directory under the test temporary directory.
// A failed run: exit status `code`, a "qkv: error:" line, and every one of `parts` in the output.
inline void expect_error(const CliRun& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, code) << r.out;
  EXPECT_NE(r.out.find("qkv: error:"), std::string::npos) << r.out;
  for (const std::string& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << "'" << p << "' not in: " << r.out;
}

inline std::string temp_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_cli_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace qkv::testing
