// qkv's own SGEMM (kernels::gemm_blocked, which kernels::sgemm uses for training-sized products)
// against OpenBLAS's cblas_sgemm on the shapes of qkv's training steps and embedding batches
// (gemm_shapes.h), in the same run: for each shape the two are timed alternately, call by call, so
// a drift in the machine's speed reaches both alike. Prints GFLOP/s of each (median of --reps
// calls after a warm-up), the ratio, and the largest difference between the two results relative
// to the largest |C| (they sum in different orders).
//
// With --bf16 it times kernels::gemm_bf16 (bf16 operands, float32 sums: bf16_gemm.h) against
// gemm_blocked's float32 instead, and prints the build that ran (kernels/isa.h).
//
// With --heads it times attention's per-head products instead (gemm_shapes.h's kHeadShapes: heads
// too short for the causal blocks, which kernels::sgemm gives to OpenBLAS's small-matrix kernels):
// many heads in a parallel loop, gemm_blocked against cblas_sgemm on the same heads, alternating;
// with --bf16 as well, gemm_bf16 against gemm_blocked (bf16 precision's attention against float32's).
//
// Usage: bench_gemm [--bf16] [--heads] [--reps R] [--threads T] [--only SUBSTRING]
//        (defaults: 7 reps, 2 threads, every shape)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_common.h"
#include "gemm_shapes.h"
#include "qkv/core/threads.h"
#include "qkv/core/cpu_features.h"
#include "qkv/kernels/attention_products.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/wide_tile.h"

namespace {
using Clock = std::chrono::steady_clock;

using qkv::bench::median;

// A batch of heads laid out as attention's projections leave them: `rows` batch rows of T
// positions, each position `stride` floats holding stride / dk heads side by side.
struct HeadBatch {
  int rows, heads_per_row;
  int64_t heads() const { return int64_t{rows} * heads_per_row; }
};

// One pass of `form` over every head of the batch, in a parallel loop (as attention_forward and
// attention_backward run them), through qkv's head_product (kernels/attention_products.h: head_tile.h
// on AVX-512 where B is read in place, else gemm_blocked; gemm_bf16 in bf16 precision) or OpenBLAS.
// x: the heads' rows (Q, K, V or dO), p: a T x T matrix a head, c: the output (T x T a head, or
// heads' rows like x).
enum class HeadKernel { QkvFloat32, OpenBlas, QkvBf16 };

void heads_pass(const HeadShape& s, const HeadForm& f, const HeadBatch& hb, HeadKernel kernel, const float* x,
                const float* p, float* c) {
  const int T = s.T, dk = s.dk;
  const bool square_out = !f.ta && f.tb;  // Q K^T: (T, T); the others: (T, dk) in the heads' rows
  const int M = T, N = square_out ? T : dk, K = square_out ? dk : T;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < hb.heads(); ++bh) {
    const int64_t row = bh / hb.heads_per_row, h = bh % hb.heads_per_row;
    const float* head = x + row * T * s.stride + h * dk;
    const float* a = square_out ? head : p + bh * T * T;
    const int lda = square_out ? s.stride : T;
    float* out = square_out ? c + bh * T * T : c + row * T * s.stride + h * dk;
    const int ldc = square_out ? T : s.stride;
    if (kernel != HeadKernel::OpenBlas) {  // what attention runs (kernels/attention_products.h)
      qkv::kernels::AttentionDims d{1, 1, T, T, dk};
      d.bf16_products = kernel == HeadKernel::QkvBf16;
      qkv::kernels::head_product(d, f.ta, f.tb, M, N, K, a, lda, head, s.stride, 0.f, out, ldc);
    } else
      cblas_sgemm(CblasRowMajor, f.ta ? CblasTrans : CblasNoTrans, f.tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, a,
                  lda, head, s.stride, 0.f, out, ldc);
  }
}

// --heads: every head shape and form, qkv and OpenBLAS (or, with bf16, qkv's bf16 and float32 products:
// what --precision bf16 and float32 run) alternating pass by pass; returns the ratios.
std::vector<double> bench_heads(int reps, int threads, const char* only, bool bf16) {
  const HeadKernel first = bf16 ? HeadKernel::QkvBf16 : HeadKernel::QkvFloat32;
  const HeadKernel second = bf16 ? HeadKernel::QkvFloat32 : HeadKernel::OpenBlas;
  std::printf("%-44s %9s %9s %7s %10s   (GFLOP/s, %d threads over the heads, median of %d)\n",
              "per-head product (M x N x K)", bf16 ? "qkv bf16" : "qkv", bf16 ? "qkv f32" : "OpenBLAS", "ratio",
              "max diff", threads, reps);
  std::vector<double> ratios;
  for (const HeadShape& s : kHeadShapes) {
    // about 4 MB of heads' rows: many heads a pass, as a batch of sentences has
    const HeadBatch hb{std::max(1, (1 << 20) / (s.T * s.stride)), s.stride / s.dk};
    std::vector<float> x(static_cast<size_t>(hb.rows) * s.T * s.stride), p(static_cast<size_t>(hb.heads()) * s.T * s.T);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.01f;
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(static_cast<int>(i % 7)) * 0.02f;
    const size_t out_size = std::max(x.size(), p.size());
    for (const HeadForm& f : kHeadForms) {
      char name[96];
      std::snprintf(name, sizeof name, "%s %s", s.name, f.name);
      if (only && !std::strstr(name, only)) continue;
      std::vector<float> c_qkv(out_size), c_blas(out_size);
      std::vector<double> t_qkv, t_blas;
      for (int r = 0; r <= reps; ++r) {  // pass 0 of each is the warm-up
        auto start = Clock::now();
        heads_pass(s, f, hb, first, x.data(), p.data(), c_qkv.data());
        const double sec_qkv = std::chrono::duration<double>(Clock::now() - start).count();
        start = Clock::now();
        heads_pass(s, f, hb, second, x.data(), p.data(), c_blas.data());
        const double sec_blas = std::chrono::duration<double>(Clock::now() - start).count();
        if (r > 0) t_qkv.push_back(sec_qkv), t_blas.push_back(sec_blas);
      }
      double diff = 0, scale = 0;
      for (size_t i = 0; i < out_size; ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(c_qkv[i] - c_blas[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(c_blas[i])));
      }
      const double flop = 2.0 * s.T * s.T * s.dk * static_cast<double>(hb.heads());
      const double q = flop / median(t_qkv) * 1e-9, o = flop / median(t_blas) * 1e-9;
      ratios.push_back(q / o);
      std::printf("%-44s %9.1f %9.1f %6.2fx %10.1e\n", name, q, o, q / o, scale > 0 ? diff / scale : diff);
    }
  }
  return ratios;
}
}  // namespace

int main(int argc, char** argv) try {
  int reps = 7, threads = 2;
  const char* only = nullptr;
  bool bf16 = false, heads = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--bf16")) bf16 = true;
    else if (!std::strcmp(argv[i], "--heads")) heads = true;
    else {
      std::fprintf(stderr, "usage: bench_gemm [--bf16] [--heads] [--reps R] [--threads T] [--only SUBSTRING]\n");
      return 2;
    }
  }
  qkv::set_num_threads(threads);
  std::printf("CPU: %s; kernels: %s; float32 tile: %s; bf16 GEMM: %s\n", qkv::cpu_features().description().c_str(),
              qkv::kernels::isa_description().c_str(), qkv::kernels::wide_tile::description().c_str(),
              qkv::kernels::gemm_bf16_description());
  if (heads) {
    const std::vector<double> ratios = bench_heads(reps, threads, only, bf16);
    if (ratios.empty()) {
      std::fprintf(stderr, "bench_gemm: no head shape matches --only %s\n", only ? only : "");
      return 1;
    }
    std::printf("%-44s %9s %9s %6.2fx\n", "median ratio", "", "", median(ratios));
    return 0;
  }
  std::printf("%-38s %9s %9s %7s %10s   (GFLOP/s, %d threads, median of %d)\n", "shape (M x N x K)",
              bf16 ? "qkv bf16" : "qkv", bf16 ? "qkv f32" : "OpenBLAS", "ratio", "max diff", threads, reps);
  std::vector<double> ratios;
  for (const Shape& s : kShapes) {
    if (only && !std::strstr(s.name, only)) continue;
    std::vector<float> a(static_cast<size_t>(s.M) * s.K), b(static_cast<size_t>(s.K) * s.N),
        c_qkv(static_cast<size_t>(s.M) * s.N), c_blas(c_qkv.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.02f;
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<double> t_qkv, t_blas;
    for (int r = 0; r <= reps; ++r) {  // call 0 of each is the warm-up (page faults, thread start)
      auto start = Clock::now();
      if (bf16)
        qkv::kernels::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c_qkv.data(), s.N);
      else
        qkv::kernels::gemm_blocked(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c_qkv.data(), s.N);
      const double sec_qkv = std::chrono::duration<double>(Clock::now() - start).count();
      start = Clock::now();
      if (bf16)
        qkv::kernels::gemm_blocked(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c_blas.data(), s.N);
      else
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K,
                    1.f, a.data(), lda, b.data(), ldb, 0.f, c_blas.data(), s.N);
      const double sec_blas = std::chrono::duration<double>(Clock::now() - start).count();
      if (r > 0) t_qkv.push_back(sec_qkv), t_blas.push_back(sec_blas);
    }
    double diff = 0, scale = 0;
    for (size_t i = 0; i < c_qkv.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(c_qkv[i] - c_blas[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(c_blas[i])));
    }
    const double flop = 2.0 * s.M * s.N * s.K, q = flop / median(t_qkv) * 1e-9, o = flop / median(t_blas) * 1e-9;
    ratios.push_back(q / o);
    std::printf("%-38s %9.1f %9.1f %6.2fx %10.1e\n", s.name, q, o, q / o, scale > 0 ? diff / scale : diff);
  }
  if (ratios.empty()) {
    std::fprintf(stderr, "bench_gemm: no shape matches --only %s\n", only ? only : "");
    return 1;
  }
  std::printf("%-38s %9s %9s %6.2fx\n", "median ratio", "", "", median(ratios));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemm: %s\n", e.what());
  return 1;
}
