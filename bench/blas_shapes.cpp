// Single-precision GEMM at qkv's training shapes through one BLAS, picked at compile time
// (bench/compare_blas.py builds this once per library it finds and runs them side by side):
//   -DUSE_CBLAS  cblas_sgemm (OpenBLAS, BLIS's CBLAS layer)
//   -DUSE_DNNL   dnnl_sgemm (oneDNN)
// Prints one line per shape: name, GFLOP/s (median of --reps timed calls after one warm-up);
// --list prints name, M, N, K, transA, transB instead (for the peers that run the same shapes).
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

struct Shape {
  const char* name;
  int M, N, K;
  bool ta, tb;
};

// Seed 000's model trained in micro-batches of 32 x 100 rows (d_model 512, d_ff 2048, vocabulary
// 5000), and the Bible model's batches of ~6000 target tokens (d_model 256, d_ff 1024, vocabulary 8000).
const Shape kShapes[] = {
    {"seed fwd  X W^T   3200 x 2048 x 512 ", 3200, 2048, 512, false, true},
    {"seed fwd  X W^T   3200 x 512 x 2048 ", 3200, 512, 2048, false, true},
    {"seed fwd  X W^T   3200 x 512 x 512  ", 3200, 512, 512, false, true},
    {"seed out  X E^T   3200 x 5000 x 512 ", 3200, 5000, 512, false, true},
    {"seed bwd  dY W    3200 x 512 x 2048 ", 3200, 512, 2048, false, false},
    {"seed bwd  dY^T X  2048 x 512 x 3200 ", 2048, 512, 3200, true, false},
    {"seed bwd  dY^T X  512 x 512 x 3200  ", 512, 512, 3200, true, false},
    {"bible fwd X W^T   6000 x 1024 x 256 ", 6000, 1024, 256, false, true},
    {"bible out X E^T   6000 x 8000 x 256 ", 6000, 8000, 256, false, true},
    {"bible bwd dY^T X  1024 x 256 x 6000 ", 1024, 256, 6000, true, false},
    // all-MiniLM-L6-v2 embedding batches of 32 sentences of ~30 pieces (d_model 384, d_ff 1536)
    {"minilm    X W^T   960 x 384 x 384   ", 960, 384, 384, false, true},
    {"minilm    X W^T   960 x 1536 x 384  ", 960, 1536, 384, false, true},
    {"minilm    X W^T   960 x 384 x 1536  ", 960, 384, 1536, false, true},
};

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--list")) {
      for (const Shape& s : kShapes) std::printf("%s\t%d\t%d\t%d\t%d\t%d\n", s.name, s.M, s.N, s.K, s.ta, s.tb);
      return 0;
    }
  }
  for (const Shape& s : kShapes) {
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
}
