#include "qkv/cli/omp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace qkv::cli {

void relaunch_with_short_omp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  // Set before exec, so a failed exec cannot loop, and the re-run sees the user's choice as made.
  if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace qkv::cli
