// One training run per checkpoint directory.
//
// Two `qkv train` runs writing the same checkpoint (the same --out started twice, or a --resume
// while the first run is still saving after Ctrl-C) swap their checkpoints over each other, and
// the one that loses finds its files gone mid-save. A run therefore holds an exclusive flock on a
// lock file beside the checkpoint it writes for as long as it runs. The kernel releases the lock
// when the process ends however it ends (kill -9 included), so a dead run never blocks the next.
#pragma once
#include <string>

namespace qkv::io {

class CheckpointLock {
 public:
  // Locks PARENT/.NAME.lock for `target` = PARENT/NAME (PARENT is created when missing; the lock
  // file is left in place). Throws Error naming `target` when another process holds the lock.
  explicit CheckpointLock(const std::string& target);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace qkv::io
