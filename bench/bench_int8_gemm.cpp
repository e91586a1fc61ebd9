// G op/s of gemm_int8's builds (activation quantization included: AVX2, and AVX-512 VNNI where
// kernels/isa.h enables it), gemm_packed (float, pre-packed weights) and OpenBLAS SGEMM (A @ W^T, W
// row-major (out, in)) at decoding sizes: M = 4..128 rows against nn.Linear weights; with --large,
// at encoder sizes: M = 960 and 4096 rows (a batch of 32 sentences of 30 tokens, a translation
// batch) against MiniLM's and the seed model's linears. Integer multiply-adds count as 2 ops, as
// float ones (GFLOP/s for the float kernels). The int8 ratios are those of the build gemm_int8 runs
// (QKV_ISA=avx2 makes it the AVX2 one and leaves out the VNNI column). Usage:
// bench_int8_gemm [--reps R] [--threads N] [--large] (N = 0: both 1 and 2 threads)
// bench_int8_gemm --sgemm-ceiling [--threads N]: prints only the SGEMM ceiling (bench_common.h)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/int8_gemm_isa.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/packed_gemm.h"

using namespace qkv;

namespace {

std::vector<float> randn(int64_t n, float stddev, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937_64 eng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  for (float& x : v) x = d(eng);
  return v;
}

// Seconds per call of f, median and best of `reps` samples; each sample repeats f enough times to
// last about 2 ms, so that microsecond-sized products are not lost in the clock's noise. The best
// sample is printed beside the median because the machine is shared: under load the median
// measures the scheduler as much as the kernel.
struct Timing {
  double median, best;
};
template <class F>
Timing seconds_per_call(int reps, F&& f) {
  const double once = bench::median_seconds(3, f);
  const int inner = std::max(1, static_cast<int>(2e-3 / std::max(once, 1e-9)));
  double best = 1e30;
  const double median = bench::median_seconds(reps, [&] {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
  return {median / inner, best / inner};
}

void bench_shape(int64_t M, int64_t in, int64_t out, int reps) {
  const std::vector<float> A = randn(M * in, 1.f, 1), W = randn(out * in, 0.05f, 2), bias = randn(out, 1.f, 3);
  std::vector<float> C(static_cast<size_t>(M * out));
  const kernels::QuantizedWeights qw = kernels::quantize_weights(W.data(), out, in);
  const kernels::PackedWeights pw = kernels::pack_weights(W.data(), out, in);
  const auto int8_timing = [&](kernels::int8_isa::Gemm gemm) {
    return seconds_per_call(reps, [&] { gemm(A.data(), M, in, qw, bias.data(), C.data(), out); });
  };
  const Timing t_avx2 = int8_timing(kernels::int8_isa::avx2());
  const kernels::int8_isa::Gemm vnni = kernels::int8_isa::vnni_or_null(), amx = kernels::int8_isa::amx_or_null();
  const Timing t_vnni = vnni ? int8_timing(vnni) : Timing{0, 0};
  const Timing t_amx = amx ? int8_timing(amx) : Timing{0, 0};
  const kernels::int8_isa::Gemm chosen = kernels::int8_isa::chosen();
  const Timing t_int8 = chosen == amx ? t_amx : chosen == vnni ? t_vnni : t_avx2;
  const Timing t_packed =
      seconds_per_call(reps, [&] { kernels::gemm_packed(A.data(), M, in, pw, bias.data(), C.data(), out); });
  const Timing t_sgemm = seconds_per_call(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, out, in, 1.f, A.data(), in, W.data(), in, 0.f, C.data(),
                out);
  });
  const double gop = 2.0 * M * in * out * 1e-9;
  const auto rate = [&](double seconds) { return seconds > 0 ? gop / seconds : 0.0; };
  std::printf("%3d %4lld %5lld %5lld | %6.1f %6.1f %6.1f %6.1f %6.1f | %5.2f %5.2f %5.2f | %6.1f %6.1f | %8.1f\n",
              num_threads(), static_cast<long long>(M), static_cast<long long>(in), static_cast<long long>(out),
              rate(t_avx2.median), rate(t_vnni.median), rate(t_amx.median), rate(t_packed.median),
              rate(t_sgemm.median), vnni ? t_avx2.median / t_vnni.median : 0.0, t_packed.median / t_int8.median,
              t_sgemm.median / t_int8.median, rate(t_avx2.best), rate(t_int8.best), t_int8.median * 1e6);
}

}  // namespace

int main(int argc, char** argv) try {
  int reps = 11, only_threads = 0;
  bool large = false, ceiling_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--large")) {
      large = true;
    } else if (!std::strcmp(argv[i], "--sgemm-ceiling")) {
      ceiling_only = true;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--reps")) {
      reps = std::stoi(argv[++i]);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--threads")) {
      only_threads = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_int8_gemm [--reps R] [--threads N] [--large] [--sgemm-ceiling]\n");
      return 2;
    }
  }
  if (reps < 1 || only_threads < 0) {
    std::fprintf(stderr, "need --reps >= 1 and --threads >= 0\n");
    return 2;
  }
  if (ceiling_only) {  // for scripts (bench_translate.py): the SGEMM ceiling alone
    set_num_threads(only_threads ? only_threads : 2);
    std::printf("sgemm ceiling %.1f GFLOP/s\n", bench::sgemm_ceiling_gflops());
    return 0;
  }
  const bool vnni = kernels::int8_isa::vnni_or_null() != nullptr;
  const kernels::int8_isa::Gemm chosen = kernels::int8_isa::chosen();
  std::printf("kernels: %s; gemm_int8 runs the %s build\n", kernels::isa_description().c_str(),
              chosen == kernels::int8_isa::avx2()           ? "AVX2"
              : chosen == kernels::int8_isa::vnni_or_null() ? "AVX-512 VNNI"
                                                            : "AMX");
  std::printf("int8 vs float GEMM, G op/s = 2 M in out / time, median of %d samples; int8 = the build gemm_int8 "
              "runs%s\n",
              reps, vnni ? "" : " (no VNNI column: this CPU or QKV_ISA does not enable avx512_vnni)");
  std::printf("%s%s\n%s%s\n", "                     |            median G op/s           |    speedup of    |",
              "  best G op/s  | int8 us", "thr    M    in   out |   avx2   vnni    amx packed  sgemm | vnni  int8  int8 |",
              "   avx2   int8 | (median)");
  std::printf("%s%s\n", "                     |                                    | /avx2 /pck /sgem |", "               |");
  const std::vector<std::vector<int64_t>> shapes =
      large ? std::vector<std::vector<int64_t>>{{384, 384}, {384, 1536}, {1536, 384}, {512, 2048}, {2048, 512}}
            : std::vector<std::vector<int64_t>>{{256, 256}, {256, 768}, {256, 1024}, {1024, 256}, {256, 8000}};
  const std::vector<int64_t> rows = large ? std::vector<int64_t>{960, 4096} : std::vector<int64_t>{4, 16, 32, 128};
  for (int threads : {1, 2}) {
    if (only_threads && threads != only_threads) continue;
    set_num_threads(threads);
    for (int64_t M : rows)
      for (const auto& s : shapes) bench_shape(M, s[0], s[1], reps);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_int8_gemm: %s\n", e.what());
  return 1;
}
