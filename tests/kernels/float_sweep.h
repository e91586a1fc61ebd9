// Inputs and error measures shared by the vectorised-math, GELU and dropout kernel tests.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace qkv::kernels::testing {

// Every 257th float of [0, limit] by bit pattern (257 is odd, so the mantissas' low bits vary),
// both signs, then the special values: +-0, subnormals, the smallest normal, huge, +-inf, NaN.
inline std::vector<float> sweep(float limit) {
  std::vector<float> xs;
  const uint32_t top = std::bit_cast<uint32_t>(limit);
  for (uint32_t b = 0; b <= top; b += 257) {
    const float v = std::bit_cast<float>(b);
    xs.push_back(v);
    xs.push_back(-v);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, std::numeric_limits<float>::denorm_min(), 1e-40f, std::numeric_limits<float>::min(), 1e-30f,
                  1e-8f, 0.5f, 1.f, limit, 20.f, 100.f, 1e4f, 1e13f, 1e30f, std::numeric_limits<float>::max(), inf}) {
    xs.push_back(v);
    xs.push_back(-v);
  }
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  return xs;
}

// The spacing of floats at |v| (subnormal spacing below the normal range).
inline double ulp_at(double v) {
  const int e = v == 0 ? -126 : std::max(std::ilogb(v), -126);
  return std::ldexp(1.0, e - 23);
}

// |got - want| in ulps of `scale` (the reference itself, or the size of the terms that cancel in it).
// Matching infinities and NaNs count as exact; a mismatch as infinitely wrong.
inline double ulp_error(float got, double want, double scale) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got) ? 0 : INFINITY;
  const float rounded = static_cast<float>(want);  // inf where want overflows float
  if (std::isinf(rounded) || std::isinf(got)) return got == rounded ? 0 : INFINITY;
  return std::abs(got - want) / ulp_at(std::abs(scale));
}

// n draws of N(0, 3^2) from a seeded generator: ordinary inputs, the same on every run.
inline std::vector<float> random_inputs(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace qkv::kernels::testing
