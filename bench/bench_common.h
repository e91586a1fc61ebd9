// Timing helpers for benchmarks: medians over repeated runs (the machine is shared and noisy).
#pragma once
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// The SGEMM ceiling on this machine now, GFLOP/s: OpenBLAS's C = A B^T (the nn.Linear layout) at
// one large shape, median of 5 after a warm-up. The benchmarks print it beside their figures,
// since this shared machine's speed moves between runs.
inline double sgemm_ceiling_gflops(int64_t M = 2048, int64_t N = 2048, int64_t K = 512) {
  std::vector<float> a(static_cast<size_t>(M * K), 1.f), b(static_cast<size_t>(N * K), 1.f), c(static_cast<size_t>(M * N));
  const double t = median_seconds(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.f, a.data(), static_cast<int>(K), b.data(), static_cast<int>(K), 0.f, c.data(), static_cast<int>(N));
  });
  return 2.0 * static_cast<double>(M * N * K) / t * 1e-9;
}

}  // namespace qkv::bench
