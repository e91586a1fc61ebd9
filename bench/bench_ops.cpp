// GFLOP/s of qkv's linear and attention ops (forward and backward) at seed 000's sizes
// (d_model 512, d_ff 2048, 8 heads, batch 64 x length 100), next to plain OpenBLAS SGEMM of the
// same shapes, printed as a fraction; then inference attention (the register tiles) at that size and
// at MiniLM's, and the attention softmax's rows with and without masked scores.
// Usage: bench_ops [--threads N] [--reps R] [--batch B --len T]
// (--batch and --len shrink the rows for a quick check, as CTest's smoke run does: bench.ops)
#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/softmax.h"
#include "qkv/ops/ops.h"

using namespace qkv;

namespace {
Tensor randn(const Dims& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  std::mt19937_64 eng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(eng);
  return t;
}

// Plain SGEMM time for C (M, N) = A (M, K) @ B^T with B (N, K), as nn.Linear's forward.
double sgemm_seconds(int64_t M, int64_t N, int64_t K, int reps) {
  Tensor a = randn(Dims{M, K}, 1), b = randn(Dims{N, K}, 2), c = Tensor::empty(Dims{M, N});
  return bench::median_seconds(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a.f32(), K, b.f32(), K, 0.f, c.f32(), N);
  });
}

void bench_linear(const char* name, int64_t B, int64_t T, int64_t K, int64_t N, int reps) {
  const int64_t M = B * T;
  Tensor x = randn(Dims{B, T, K}, 3), w = randn(Dims{N, K}, 4), b = randn(Dims{N}, 5);
  Tensor y = ops::linear_forward(x, w, b);
  Tensor dy = randn(y.shape(), 6);
  const double flops = 2.0 * M * N * K;
  const double t_fwd = bench::median_seconds(reps, [&] { y = ops::linear_forward(x, w, b); });
  const double t_bwd = bench::median_seconds(reps, [&] {
    Tensor dx, dw, db;
    ops::linear_backward(dy, x, w, &dx, &dw, &db);
  });
  const double t_gemm = sgemm_seconds(M, N, K, reps);
  std::printf("%-22s fwd %7.1f GFLOP/s  bwd %7.1f GFLOP/s  | sgemm %7.1f GFLOP/s | fwd/sgemm %.2f  bwd/sgemm %.2f\n",
              name, flops / t_fwd * 1e-9, 2 * flops / t_bwd * 1e-9, flops / t_gemm * 1e-9, t_gemm / t_fwd,
              2 * t_gemm / t_bwd);
}

// q, k or v as split-head views (B, H, T, dk) of a (B, T, H * dk) projection, as in the model.
Tensor random_heads(int64_t B, int64_t T, int64_t H, int64_t dk, uint64_t seed) {
  return randn(Dims{B, T, H * dk}, seed).reshape(Dims{B, T, H, dk}).transpose(1, 2);
}

void bench_attention(const char* name, int64_t B, int64_t H, int64_t T, int64_t dk, bool causal, int reps) {
  Tensor q = random_heads(B, T, H, dk, 7), k = random_heads(B, T, H, dk, 8), v = random_heads(B, T, H, dk, 9);
  ops::AttentionMasks masks;
  masks.causal = causal;
  Tensor probs;
  Tensor out = ops::attention_forward(q, k, v, masks, {}, &probs);
  Tensor dout = randn(out.shape(), 10);
  const double flops = 4.0 * B * H * T * T * dk;  // QK^T and PV
  const double t_fwd = bench::median_seconds(reps, [&] { out = ops::attention_forward(q, k, v, masks, {}, &probs); });
  const double t_bwd = bench::median_seconds(reps, [&] {
    Tensor dq, dkk, dv;
    ops::attention_backward(dout, q, k, v, probs, masks, {}, &dq, &dkk, &dv);
  });
  // The same GEMM work as one SGEMM per head, back to back (the best BLAS can do for these shapes).
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), s = Tensor::empty(Dims{B * H, T, T}),
         o = Tensor::empty(Dims{B * H, T, dk});
  const double t_gemm = bench::median_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < B * H; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dk, 1.f, qc.f32() + i * T * dk, dk,
                  kc.f32() + i * T * dk, dk, 0.f, s.f32() + i * T * T, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dk, T, 1.f, s.f32() + i * T * T, T,
                  vc.f32() + i * T * dk, dk, 0.f, o.f32() + i * T * dk, dk);
    }
  });
  std::printf("%-22s fwd %7.1f GFLOP/s  bwd %7.1f GFLOP/s  | sgemm %7.1f GFLOP/s | fwd/sgemm %.2f  bwd/sgemm %.2f\n",
              name, flops / t_fwd * 1e-9, 2 * flops / t_bwd * 1e-9, flops / t_gemm * 1e-9, t_gemm / t_fwd,
              2 * t_gemm / t_bwd);
}

// Inference attention (no softmax kept, no backward): the register tiles of kernels/attention_tiles.h
// for heads of at most 128 keys, the rest of the sequence's keys masked as padding would be.
void bench_attention_inference(const char* name, int64_t B, int64_t H, int64_t T, int64_t dk, int reps) {
  Tensor q = random_heads(B, T, H, dk, 7), k = random_heads(B, T, H, dk, 8), v = random_heads(B, T, H, dk, 9);
  // Each batch row keeps a different number of keys (T down to T / 2), as sorted sentences do.
  Tensor key_keep = Tensor::zeros(Dims{B, T}, DType::I32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T - b * (T / 2) / B; ++j) key_keep.i32()[b * T + j] = 1;
  ops::AttentionMasks masks;
  masks.key_keep = key_keep;
  Tensor out = ops::attention_forward(q, k, v, masks, {}, nullptr, true);
  const double flops = 4.0 * B * H * T * T * dk;
  const double t_fwd =
      bench::median_seconds(reps, [&] { out = ops::attention_forward(q, k, v, masks, {}, nullptr, true); });
  std::printf("%-22s fwd %7.1f GFLOP/s  (B %lld, T %lld, %lld heads of %lld)\n", name, flops / t_fwd * 1e-9,
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
              static_cast<long long>(dk));
}

// kernels::softmax_row (the attention softmax) on rows of C scores, none masked and the last half
// masked (masked_fill's -1e9, as padding leaves them; 36 is the Bible's length, whose last 4 scores
// take the scalar tail): ns per score. A masked score's exp rounds to zero; computed, it underflows,
// which some CPUs handle on a slow path.
void bench_softmax_rows(int64_t C, int reps) {
  const int64_t rows = 262144 / C;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> plain(rows * C), masked(plain.size()), work(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    plain[i] = normal(gen);
    masked[i] = static_cast<int64_t>(i) % C >= C / 2 ? -1e9f : plain[i];
  }
  const auto time_rows = [&](const std::vector<float>& scores) {
    return bench::median_seconds(reps, [&] {
      work = scores;
      for (int64_t r = 0; r < rows; ++r) kernels::softmax_row(work.data() + r * C, C);
    });
  };
  const double t_plain = time_rows(plain), t_masked = time_rows(masked);
  std::printf("softmax rows of %-8lld none masked %.3f ns/score, half masked %.3f ns/score (one thread, with a copy of "
              "the rows)\n",
              static_cast<long long>(C), t_plain / plain.size() * 1e9, t_masked / plain.size() * 1e9);
}
}  // namespace

int main(int argc, char** argv) try {
  int threads = 2, reps = 7;
  int64_t batch = 64, len = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: missing value\nusage: bench_ops [--threads N] [--reps R] [--batch B] [--len T]\n", argv[i]);
      return 2;
    }
    if (arg == "--threads") threads = std::stoi(argv[++i]);
    else if (arg == "--reps") reps = std::stoi(argv[++i]);
    else if (arg == "--batch") batch = std::stoll(argv[++i]);
    else if (arg == "--len") len = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "unknown argument %s\nusage: bench_ops [--threads N] [--reps R] [--batch B] [--len T]\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || batch < 1 || len < 1) {
    std::fprintf(stderr, "need --threads, --reps, --batch, --len >= 1\n");
    return 2;
  }
  set_num_threads(threads);
  std::printf("qkv op benchmark: %d threads, median of %d runs; seed sizes: batch %lld x %lld, d_model 512, d_ff 2048, 8 heads\n",
              threads, reps, static_cast<long long>(batch), static_cast<long long>(len));
  bench_linear("linear 512->512", batch, len, 512, 512, reps);
  bench_linear("linear 512->2048", batch, len, 512, 2048, reps);
  bench_linear("linear 2048->512", batch, len, 2048, 512, reps);
  bench_linear("linear 512->5000", batch, len, 512, 5000, reps);
  bench_attention("attention (pad)", batch, 8, len, 64, false, reps);
  bench_attention("attention (causal)", batch, 8, len, 64, true, reps);
  bench_attention_inference("attention (inference)", batch, 8, len, 64, reps);
  bench_attention_inference("attention (MiniLM)", 32, 12, 40, 32, reps);
  bench_softmax_rows(64, reps);
  bench_softmax_rows(36, reps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_ops: %s\n", e.what());
  return 1;
}
