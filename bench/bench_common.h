// Timing helpers for benchmarks: medians over repeated runs (the machine is shared and noisy).
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace qkv::bench {

template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up: fills the buffer pool and BLAS buffers
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace qkv::bench
