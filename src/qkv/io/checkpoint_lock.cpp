#include "qkv/io/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"

namespace qkv::io {

namespace fs = std::filesystem;

CheckpointLock::CheckpointLock(const std::string& target) {
  const fs::path t = fs::path(target).lexically_normal();
  const fs::path name = t.has_filename() ? t.filename() : t.parent_path().filename();
  const fs::path parent = t.has_filename() ? t.parent_path() : t.parent_path().parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  QKV_CHECK(!ec, parent.string() << ": cannot create the directory: " << ec.message());
  const std::string base = name.string();  // an lvalue: GCC 12 warns on "." + a temporary (-Wrestrict)
  path_ = (parent / ("." + base + ".lock")).string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  QKV_CHECK(fd_ >= 0, path_ << ": cannot open the lock file: " << std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    QKV_CHECK(err != EWOULDBLOCK, target << ": another qkv training run is writing this checkpoint (it holds "
                                         << path_ << "); wait for it to end or stop it first");
    throw Error(path_ + ": cannot lock: " + std::strerror(err));
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace qkv::io
