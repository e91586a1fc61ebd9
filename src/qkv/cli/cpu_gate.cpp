// Before anything else of qkv runs: a CPU without the instruction sets qkv is compiled for
// (x86-64-v3, core/cpu_baseline.h) gets a `qkv: error:` line and exit status 1 instead of an
// illegal instruction at some later point (a QEMU guest's default CPU model, an older machine).
//
// A constructor of priority 101 runs before the library's static initialisers (the linker orders
// .init_array by priority), which may already use AVX. This file, like core/cpu_baseline.cpp, is
// compiled for the plain x86-64 baseline (CMakeLists.txt), and calls nothing else of qkv's.
#include <unistd.h>

#include <cstring>

#include "qkv/core/cpu_baseline.h"

namespace {

void write_stderr(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n, left -= static_cast<size_t>(n);
  }
}

__attribute__((constructor(101))) void refuse_a_cpu_below_the_baseline() {
  char missing[160];
  if (!*qkv::missing_baseline_features(qkv::read_cpuid_words(), missing, sizeof missing)) return;
  write_stderr("qkv: error: this CPU lacks ");
  write_stderr(missing);
  write_stderr(", which qkv is compiled for (x86-64-v3: AVX2 and FMA, as on Intel Haswell, AMD Zen and later "
               "CPUs; in a QEMU guest, give it such a CPU model, e.g. -cpu host)\n");
  _exit(1);
}

}  // namespace
