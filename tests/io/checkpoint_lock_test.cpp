// One training run per checkpoint (io/checkpoint_lock.h): a second holder is refused with a message
// naming the checkpoint, the lock ends with its holder (SIGKILL included), and `qkv train` into a
// checkpoint another run holds stops with that message before it writes anything.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "cli/cli_util.h"
#include "qkv/core/error.h"
#include "qkv/io/checkpoint_lock.h"

namespace qkv::io {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/qkv_lock_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

TEST(CheckpointLock, ASecondHolderIsRefusedNamingTheCheckpointUntilTheFirstEnds) {
  const std::string root = fresh_dir("second"), target = root + "/run/last";
  std::optional<CheckpointLock> first(std::in_place, target);
  EXPECT_EQ(fs::path(first->path()), fs::path(root + "/run/.last.lock").lexically_normal());
  EXPECT_TRUE(fs::is_directory(root + "/run")) << "the parent is created";
  try {
    CheckpointLock second(target);
    FAIL() << "a second lock on one checkpoint must be refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(target), std::string::npos) << m;
    EXPECT_NE(m.find("another qkv training run"), std::string::npos) << m;
  }
  CheckpointLock other(root + "/run/best");  // a different checkpoint is free
  first.reset();
  EXPECT_NO_THROW(CheckpointLock again(target));
  fs::remove_all(root);
}

TEST(CheckpointLock, AHolderKilledWithSigkillLeavesItFree) {
  const std::string root = fresh_dir("kill9"), target = root + "/ckpt";
  fs::create_directories(root);
  const std::string lock_file = root + "/.ckpt.lock";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only async-signal-safe calls here: the parent has threads
    const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    for (;;) ::pause();
  }
  bool held = false;
  for (int i = 0; i < 200 && !held; ++i) {
    try {
      CheckpointLock probe(target);
    } catch (const Error&) {
      held = true;
    }
    // The child has not locked yet. Wait with the probe released: a probe held through the wait
    // kept the child blocked in flock, and on a loaded machine this process took the lock back
    // first every time (failed here with the 2 cores busy training).
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(held) << "the child's lock must refuse this process";
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NO_THROW(CheckpointLock after(target)) << "the kernel releases a killed holder's lock";
  fs::remove_all(root);
}

TEST(CheckpointLock, QkvTrainIntoAHeldCheckpointStopsNamingIt) {
  const std::string root = fresh_dir("cli"), out = root + "/tiny";
  const std::string args = "train --synthetic --preset tiny --steps 2 --threads 1 --output-dir " + out;
  {
    const CheckpointLock held(out);
    const testing::CliRun r = testing::run_qkv_split(args);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("another qkv training run"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out + "/model.safetensors")) << "nothing is written under another run's lock";
  }
  const testing::CliRun r = testing::run_qkv_split(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace qkv::io
