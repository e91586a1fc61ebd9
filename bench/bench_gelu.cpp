// GELU kernels: the scalar std::erf / std::tanh loops they replaced against the AVX2 kernels of
// kernels/elementwise.cpp, forward and backward, exact and tanh GELU, on n = 64 * 100 * 2048 floats
// (the feed-forward activations of a 64 x 100 batch with d_ff 2048). Prints medians and speed-ups.
// Usage: bench_gelu [--threads N] [--reps R]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/elementwise.h"

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

int main(int argc, char** argv) {
  int threads = 2, reps = 9;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gelu [--threads N] [--reps R]\n");
      return 2;
    }
  }
  set_num_threads(threads);
  const int64_t n = 64 * 100 * 2048;
  std::vector<float> x(n), dy(n), y(n), dx(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 1.f);  // pre-activations of a trained layer are about N(0, 1)
  for (int64_t i = 0; i < n; ++i) x[i] = d(rng), dy[i] = d(rng);

  using Fwd = void (*)(float*, const float*, int64_t);
  using Bwd = void (*)(float*, const float*, const float*, int64_t, bool);
  struct Case {
    const char* name;
    Fwd old_fwd, new_fwd;
    Bwd old_bwd, new_bwd;
  };
  const Case cases[] = {{"gelu (erf)", scalar::gelu_forward, kernels::gelu_forward, scalar::gelu_backward,
                         kernels::gelu_backward},
                        {"gelu_tanh", scalar::gelu_tanh_forward, kernels::gelu_tanh_forward,
                         scalar::gelu_tanh_backward, kernels::gelu_tanh_backward}};
  std::printf("n = %lld floats, %d threads, median of %d runs\n", static_cast<long long>(n), threads, reps);
  for (const Case& c : cases) {
    const double f_old = bench::median_seconds(reps, [&] { c.old_fwd(y.data(), x.data(), n); });
    const double f_new = bench::median_seconds(reps, [&] { c.new_fwd(y.data(), x.data(), n); });
    const double b_old = bench::median_seconds(reps, [&] { c.old_bwd(dx.data(), dy.data(), x.data(), n, false); });
    const double b_new = bench::median_seconds(reps, [&] { c.new_bwd(dx.data(), dy.data(), x.data(), n, false); });
    std::printf("%-11s forward  scalar %7.2f ms  avx2 %7.2f ms  speed-up %5.2fx\n", c.name, f_old * 1e3, f_new * 1e3,
                f_old / f_new);
    std::printf("%-11s backward scalar %7.2f ms  avx2 %7.2f ms  speed-up %5.2fx\n", c.name, b_old * 1e3, b_new * 1e3,
                b_old / b_new);
  }
  return 0;
}
