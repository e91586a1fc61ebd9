// CTest runs test processes in parallel (`ctest -j2` on 2 cores). With 2 OpenMP threads each, the
// processes' spinning threads fight for the cores and a 3-second test takes minutes, so every test
// process uses one thread unless QKV_TEST_THREADS says otherwise. Tests about threading set their
// own counts (e.g. the dropout mask is compared across 1 and 2 threads).
#include <cstdlib>
#include <string>

#include "qkv/core/threads.h"

namespace {
const int kTestThreads = [] {
  const char* env = std::getenv("QKV_TEST_THREADS");
  const int n = env ? std::stoi(env) : 1;
  qkv::set_num_threads(n);
  return n;
}();
}  // namespace
