// Element-wise maps 8 float lanes at a time (AVX2), shared by the vectorised activation kernels
// (GELU in kernels/gelu.cpp and its AVX-512 build, SiLU and ReLU in kernels/elementwise.cpp). Internal
// linkage: each translation unit, whatever instruction set it is built for, keeps its own copy.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace qkv::kernels {
namespace {

// Below this many elements the OpenMP fork/join costs more than the loop. Vectorised, an
// activation costs about what the other cheap loops cost, so it goes parallel at their threshold.
constexpr int64_t kMapParallelMin = 1 << 15;

// lane(i) for i = 0, 8, ... below full: split among the threads above kMapParallelMin elements, else
// on the calling thread without entering OpenMP. A parallel region whose `if` is false still sets
// up a team of one, about a microsecond: the int8 feed-forward maps each row of 1,536 floats alone
// (ops::activation_linear_forward), and paid that on every row.
template <class Lane>
void for_each_block8(int64_t full, int64_t n, Lane lane) {
  if (n > kMapParallelMin) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < full; i += 8) lane(i);
  } else {
    for (int64_t i = 0; i < full; i += 8) lane(i);
  }
}

// y[i] = f(x[i]) 8 lanes at a time. The last n % 8 values go through the same f in a zero-padded
// block of 8, so every value gets the same operations wherever it sits: the result does not depend
// on n, on the offset of the array or on how the threads split it.
template <class F>
void map8(float* y, const float* x, int64_t n, F f) {
  const int64_t full = n - n % 8;
  for_each_block8(full, n, [&](int64_t i) { _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i))); });
  if (full == n) return;
  float in[8] = {}, out[8];
  for (int64_t i = full; i < n; ++i) in[i - full] = x[i];
  _mm256_storeu_ps(out, f(_mm256_loadu_ps(in)));
  for (int64_t i = full; i < n; ++i) y[i] = out[i - full];
}

// dx = dy * f'(x), or dx += it; f' evaluated as map8 does.
template <class F>
void map8_grad(float* dx, const float* dy, const float* x, int64_t n, bool accumulate, F fprime) {
  const auto lane = [&](float* dxp, const float* dyp, __m256 xv) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(dyp), fprime(xv));
    _mm256_storeu_ps(dxp, accumulate ? _mm256_add_ps(_mm256_loadu_ps(dxp), g) : g);
  };
  const int64_t full = n - n % 8;
  for_each_block8(full, n, [&](int64_t i) { lane(dx + i, dy + i, _mm256_loadu_ps(x + i)); });
  if (full == n) return;
  float xs[8] = {}, dys[8] = {}, dxs[8] = {};
  for (int64_t i = full; i < n; ++i) xs[i - full] = x[i], dys[i - full] = dy[i], dxs[i - full] = dx[i];
  lane(dxs, dys, _mm256_loadu_ps(xs));
  for (int64_t i = full; i < n; ++i) dx[i] = dxs[i - full];
}

}  // namespace
}  // namespace qkv::kernels
