// Output as it is made (issue 37): `qkv translate -o FILE` writes what stdout would show, in input
// order whatever the batching, flushed batch by batch, so a job interrupted midway keeps the lines
// it wrote; progress on stderr says the rate and the ETA; `qkv score -o FILE` writes its lines too.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::read_file;
using qkv::testing::run_qkv_split;

using qkv::testing::lines_of;

// An untrained checkpoint (vocabulary 16, 16 positions) and 20 id lines of lengths 1 to 9 in no
// order, an empty one among them: enough for two of translate's sort windows at --batch-size 1.
class TranslateOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(qkv::testing::temp_dir("output"));
    std::ofstream(path("config.json")) << R"({"src_vocab_size": 16, "tgt_vocab_size": 16, "d_model": 16,
        "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 16})";
    const CliRun r = run_qkv_split("init --config " + path("config.json") + " --output-dir " + path("ckpt") + " --seed 5");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ofstream ids(path("ids.txt"));
    for (int i = 0; i < 20; ++i) {
      const int length = i == 7 ? 0 : 1 + (i * 5) % 9;
      for (int k = 0; k < length; ++k) ids << (k ? " " : "") << 4 + (i * 3 + k * 7) % 12;
      ids << "\n";
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string translate(const std::string& input, const std::string& flags) {
    return "translate --checkpoint " + path("ckpt") + " --ids --threads 1 --input " + input + " " + flags;
  }
  static std::string* dir_;
};
std::string* TranslateOutput::dir_ = nullptr;

TEST_F(TranslateOutput, OutputFileHoldsWhatStdoutShows) {
  for (const std::string flags : {"--beam-size 2", "--beam-size 3 --num-hypotheses 2", "--beam-size 1 --batch-size 3"}) {
    SCOPED_TRACE(flags);
    const CliRun to_stdout = run_qkv_split(translate(path("ids.txt"), flags + " --quiet"));
    ASSERT_EQ(to_stdout.code, 0) << to_stdout.err;
    const int per_line = flags.find("--num-hypotheses 2") != std::string::npos ? 2 : 1;
    EXPECT_EQ(lines_of(to_stdout.out).size(), 19u * per_line + 1) << "20 lines, one empty:\n" << to_stdout.out;
    fs::remove(path("out.txt"));
    for (const std::string option : {"-o ", "--output "}) {
      const CliRun to_file = run_qkv_split(translate(path("ids.txt"), flags + " --quiet " + option + path("out.txt")));
      ASSERT_EQ(to_file.code, 0) << to_file.err;
      EXPECT_EQ(to_file.out, "") << "nothing on stdout with " << option;
      EXPECT_EQ(read_file(path("out.txt")), to_stdout.out) << option;
    }
    // "-" is stdout.
    EXPECT_EQ(run_qkv_split(translate(path("ids.txt"), flags + " --quiet -o -")).out, to_stdout.out);
  }
}

// Sentences run sorted by length (in windows of 16 batches), but each output line is its input
// line's: with --batch-size 1 every sentence is decoded alone, so line i must equal the
// translation of input line i given by itself.
TEST_F(TranslateOutput, LinesComeInInputOrder) {
  const CliRun all = run_qkv_split(translate(path("ids.txt"), "--batch-size 1 --quiet -o " + path("ordered.txt")));
  ASSERT_EQ(all.code, 0) << all.err;
  const std::vector<std::string> input = lines_of(read_file(path("ids.txt")));
  const std::vector<std::string> output = lines_of(read_file(path("ordered.txt")));
  ASSERT_EQ(output.size(), input.size());
  std::set<std::string> distinct;
  for (size_t i = 0; i < input.size(); ++i) {
    std::ofstream(path("one.txt")) << input[i] << "\n";
    const CliRun one = run_qkv_split(translate(path("one.txt"), "--quiet"));
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_EQ(output[i] + "\n", one.out) << "line " << i + 1 << " (" << input[i] << ")";
    distinct.insert(one.out);
  }
  // Else a line out of place could go unseen.
  EXPECT_GE(distinct.size(), 5u) << "the untrained model should translate the lines differently";
}

TEST_F(TranslateOutput, ProgressSaysTheRateAndTheEta) {
  const CliRun r = run_qkv_split(translate(path("ids.txt"), "--batch-size 4"));
  ASSERT_EQ(r.code, 0) << r.err;
  // Not a terminal: a line at most every 2 s and the last one always (19 sentences: the empty one
  // is not translated).
  EXPECT_NE(r.err.find("translated 19/19 sentences, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" sentences/s, ETA 0:00\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("qkv translate: 19 sentences, "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "no carriage returns in a log";
  const CliRun quiet = run_qkv_split(translate(path("ids.txt"), "--batch-size 4 --quiet"));
  EXPECT_EQ(quiet.err, "");
}

// The signal lines of /proc/PID/status (blocked, ignored, caught), for a failure's message.
std::string signal_state(pid_t pid) {
  std::istringstream status(read_file("/proc/" + std::to_string(pid) + "/status"));
  std::string state;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigBlk", 0) == 0 || line.rfind("SigIgn", 0) == 0 || line.rfind("SigCgt", 0) == 0)
      state += line + "; ";
  return state;
}

// Starts `qkv args` in the background, waits until `file` holds at least `lines` lines, then sends
// SIGINT; returns qkv's wait status, or -1 when it ended (or never wrote them) first. *state gets
// the child's signal state as it was sent SIGINT.
int interrupt_after_lines(const std::string& args, const std::string& file, size_t lines, std::string* state) {
  const std::string cmd = "exec " + std::string(QKV_BIN) + " " + args + " 2>/dev/null";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  // SIGINT as the job's default and unblocked, whatever this process inherited: a test binary
  // started in the background by a non-interactive shell (`qkv_tests &`) ignores SIGINT, and exec
  // passes an ignored signal on, so the job ran to its end.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, "/bin/sh", nullptr, &attr, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) return -1;
  int status = 0;
  for (int i = 0; i < 6000; ++i) {  // at most a minute
    if (::waitpid(pid, &status, WNOHANG) == pid) return -1;  // it finished before we saw its lines
    if (lines_of(read_file(file)).size() >= lines) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  *state = signal_state(pid);
  ::kill(pid, SIGINT);
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

// Lines are written as batches finish, not at the end: a long job stopped after its first window
// has left those lines, whole, in the file, and they are the lines a full run gives.
TEST_F(TranslateOutput, AnInterruptedJobKeepsTheLinesItWrote) {
  const std::vector<std::string> input = lines_of(read_file(path("ids.txt")));
  std::ofstream big(path("big.txt"));
  for (int i = 0; i < 2500; ++i)  // 50,000 lines: many seconds at --batch-size 1
    for (const std::string& line : input) big << line << "\n";
  big.close();
  std::string state;
  const int status = interrupt_after_lines(translate(path("big.txt"), "--batch-size 1 --beam-size 4 -o " + path("big.out")),
                                           path("big.out"), 16, &state);
  ASSERT_NE(status, -1) << "no output before the job ended: lines should come as batches finish";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status << "; the job's " << state;
  const std::string kept = read_file(path("big.out"));
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.back(), '\n') << "whole lines only";
  const std::vector<std::string> kept_lines = lines_of(kept);
  EXPECT_LT(kept_lines.size(), 50000u);
  const CliRun first = run_qkv_split(translate(path("ids.txt"), "--batch-size 1 --beam-size 4 --quiet"));
  ASSERT_EQ(first.code, 0) << first.err;
  const std::vector<std::string> want = lines_of(first.out);
  ASSERT_EQ(want.size(), input.size());
  for (size_t i = 0; i < kept_lines.size(); ++i) EXPECT_EQ(kept_lines[i], want[i % want.size()]) << "line " << i + 1;
}

TEST_F(TranslateOutput, ScoreWritesItsLinesToTheOutputFile) {
  std::ofstream(path("pairs.txt")) << "1 4 5 2\n1 7 8 9 2\n";
  std::ofstream(path("src2.txt")) << "4 5 6\n7 8 9 10\n";
  const std::string score = "score --checkpoint " + path("ckpt") + " --src " + path("src2.txt") + " --tgt " +
                            path("pairs.txt") + " --per-line --threads 1";
  const CliRun to_stdout = run_qkv_split(score);
  ASSERT_EQ(to_stdout.code, 0) << to_stdout.err;
  ASSERT_EQ(lines_of(to_stdout.out).size(), 3u) << to_stdout.out;  // two sums, then the loss
  const CliRun to_file = run_qkv_split(score + " -o " + path("score.txt"));
  ASSERT_EQ(to_file.code, 0) << to_file.err;
  EXPECT_EQ(to_file.out, "");
  EXPECT_EQ(read_file(path("score.txt")), to_stdout.out);
}

}  // namespace
