// Single-precision GEMM at qkv's training shapes through one BLAS, picked at compile time
// (bench/compare_blas.py builds this once per library it finds and runs them side by side):
//   -DUSE_CBLAS  cblas_sgemm (OpenBLAS, BLIS's CBLAS layer)
//   -DUSE_DNNL   dnnl_sgemm (oneDNN)
// Prints one line per shape: name, GFLOP/s (median of --reps timed calls after one warm-up);
// --list prints name, M, N, K, transA, transB instead (for the peers that run the same shapes);
// --only SUBSTRING keeps the shapes whose name contains it (both modes).
// Row-major C = op(A) op(B), the three products of a linear layer: forward X W^T, the input's
// gradient dY W, the weight's gradient dY^T X.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(USE_CBLAS)
#include <cblas.h>
void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, A, lda, B,
              ldb, 0.f, C, ldc);
}
#elif defined(USE_DNNL)
#include <dnnl.h>
void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc) != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed\n");
    std::exit(1);
  }
}
#else
#error "define USE_CBLAS or USE_DNNL"
#endif

#include "gemm_shapes.h"

int main(int argc, char** argv) {
  int reps = 5;
  bool list = false;
  const char* only = "";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--list")) list = true;
    else {
      std::fprintf(stderr, "usage: blas_shapes [--reps R] [--only SUBSTRING] [--list]\n");
      return 2;
    }
  }
  int matched = 0;
  for (const Shape& s : kShapes) {
    if (!std::strstr(s.name, only)) continue;
    ++matched;
    if (list) {
      std::printf("%s\t%d\t%d\t%d\t%d\t%d\n", s.name, s.M, s.N, s.K, s.ta, s.tb);
      continue;
    }
    std::vector<float> a(static_cast<size_t>(s.M) * s.K), b(static_cast<size_t>(s.K) * s.N),
        c(static_cast<size_t>(s.M) * s.N);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.02f;
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<double> t;
    for (int r = 0; r <= reps; ++r) {
      const auto start = std::chrono::steady_clock::now();
      gemm(s.ta, s.tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, c.data(), s.N);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r > 0) t.push_back(sec);  // the first call is the warm-up (page faults, thread start)
    }
    std::sort(t.begin(), t.end());
    std::printf("%s\t%.1f\n", s.name, 2.0 * s.M * s.N * s.K / t[t.size() / 2] * 1e-9);
  }
  if (matched == 0) {
    std::fprintf(stderr, "blas_shapes: no shape matches --only %s\n", only);
    return 1;
  }
  return 0;
}
