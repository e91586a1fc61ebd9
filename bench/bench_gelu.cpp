// GELU kernels: the scalar std::erf / std::tanh loops they replaced against the vector kernels
// (kernels/gelu.cpp: the AVX2 build, and the AVX-512F build where the CPU has it), forward and
// backward, exact and tanh GELU, on n = 64 * 100 * 2048 floats (the feed-forward activations of a
// 64 x 100 batch with d_ff 2048). Prints medians and speed-ups; the last row is the GELU that an int8
// feed-forward applies to the rows it quantizes (gelu_forward_to_quantize).
// Usage: bench_gelu [--threads N] [--reps R] [--n FLOATS]   (--n: fewer floats for a quick check)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/gelu_isa.h"

using namespace qkv;

namespace scalar {  // the kernels as they were before vectorisation, for comparison
constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f, kGeluCubic = 0.044715f;

void gelu_forward(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
}
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.f + std::erf(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    const float g = dy[i] * (cdf + x[i] * pdf);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}
void gelu_tanh_forward(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
}
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], v2 = v * v;
    const float t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v2 * v));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v2);
    const float g = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}
}  // namespace scalar

int main(int argc, char** argv) try {
  int threads = 2, reps = 9;
  int64_t n = 64 * 100 * 2048;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else if (a == "--n" && i + 1 < argc) n = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gelu [--threads N] [--reps R] [--n FLOATS]\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || n < 1) {
    std::fprintf(stderr, "need --threads, --reps, --n >= 1\n");
    return 2;
  }
  set_num_threads(threads);
  std::vector<float> x(n), dy(n), y(n), dx(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 1.f);  // pre-activations of a trained layer are about N(0, 1)
  for (int64_t i = 0; i < n; ++i) x[i] = d(rng), dy[i] = d(rng);

  using Fwd = void (*)(float*, const float*, int64_t);
  using Bwd = void (*)(float*, const float*, const float*, int64_t, bool);
  struct Case {
    const char* name;
    Fwd scalar_fwd, avx2_fwd, avx512_fwd;
    Bwd scalar_bwd, avx2_bwd, avx512_bwd;
  };
  const kernels::gelu_isa::Kernels& avx2 = kernels::gelu_isa::avx2();
  const kernels::gelu_isa::Kernels* avx512 = kernels::gelu_isa::avx512_or_null();
  const Case cases[] = {{"gelu (erf)", scalar::gelu_forward, avx2.forward, avx512 ? avx512->forward : nullptr,
                         scalar::gelu_backward, avx2.backward, avx512 ? avx512->backward : nullptr},
                        {"gelu_tanh", scalar::gelu_tanh_forward, avx2.tanh_forward,
                         avx512 ? avx512->tanh_forward : nullptr, scalar::gelu_tanh_backward, avx2.tanh_backward,
                         avx512 ? avx512->tanh_backward : nullptr}};
  std::printf("n = %lld floats, %d threads, median of %d runs; AVX-512F build: %s\n", static_cast<long long>(n),
              threads, reps, avx512 ? "yes (qkv uses it but for gelu_tanh backward)" : "no (this CPU lacks AVX-512F)");
  const auto report = [&](const char* name, const char* dir, double old_s, double avx2_s, double avx512_s) {
    std::printf("%-11s %-8s scalar %7.2f ms  avx2 %7.2f ms (%5.2fx)", name, dir, old_s * 1e3, avx2_s * 1e3,
                old_s / avx2_s);
    if (avx512_s > 0) std::printf("  avx512 %7.2f ms (%5.2fx, %4.2fx avx2)", avx512_s * 1e3, old_s / avx512_s, avx2_s / avx512_s);
    std::printf("\n");
  };
  const auto fwd = [&](Fwd f) { return f ? bench::median_seconds(reps, [&] { f(y.data(), x.data(), n); }) : 0.0; };
  const auto bwd = [&](Bwd f) {
    return f ? bench::median_seconds(reps, [&] { f(dx.data(), dy.data(), x.data(), n, false); }) : 0.0;
  };
  for (const Case& c : cases) {
    report(c.name, "forward", fwd(c.scalar_fwd), fwd(c.avx2_fwd), fwd(c.avx512_fwd));
    report(c.name, "backward", bwd(c.scalar_bwd), bwd(c.avx2_bwd), bwd(c.avx512_bwd));
  }
  // The form an int8 feed-forward applies to the rows it quantizes, against the exact forward.
  report("gelu, int8", "forward", fwd(scalar::gelu_forward), fwd(avx2.forward_to_quantize),
         fwd(avx512 ? avx512->forward_to_quantize : nullptr));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gelu: %s\n", e.what());
  return 1;
}
