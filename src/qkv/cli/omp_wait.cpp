#include "qkv/cli/omp_wait.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace qkv::cli {

void relaunch_with_short_omp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  // Set before exec, so a failed exec cannot loop, and the re-run sees the user's choice as made.
  if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  // The binary's own path, not /proc/self/exe: the kernel names the process after the file it
  // executes, and `ps -C qkv`, `pkill qkv` and top would otherwise see "exe".
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    execv(path, argv);
  }
  execv("/proc/self/exe", argv);
}

}  // namespace qkv::cli
