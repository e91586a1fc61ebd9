// kernels::adam_step's eight lanes and its scalar tail round each element as the documented
// sequence does (kernels/adam.cpp): the reference below, one element at a time, bit for bit;
// without decay, with L2 weight decay and with AdamW's decoupled decay; for lengths that end inside
// a vector and for threaded ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "qkv/kernels/adam.h"

namespace qkv::kernels {
namespace {

struct State {
  std::vector<float> param, grad, m, v;
};

State random_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (int64_t i = 0; i < n; ++i) {
    s.param[i] = normal(rng);
    s.grad[i] = normal(rng) * 1e-2f;
    s.m[i] = normal(rng) * 1e-3f;
    s.v[i] = std::abs(normal(rng)) * 1e-5f;
  }
  return s;
}

// PyTorch 1.13's single-tensor Adam, each product that meets a sum fused as adam.cpp documents.
void reference_step(State& s, const AdamScalars& k) {
  for (size_t i = 0; i < s.param.size(); ++i) {
    const float p = k.param_scale != 1.f ? s.param[i] * k.param_scale : s.param[i];
    float g = s.grad[i];
    if (k.weight_decay != 0.f) g = std::fma(k.weight_decay, p, g);
    s.m[i] = std::fma(s.m[i], k.beta1, g * k.one_minus_beta1);
    s.v[i] = std::fma(s.v[i], k.beta2, (g * g) * k.one_minus_beta2);
    const float denom = std::sqrt(s.v[i]) / k.bias_correction2_sqrt + k.eps;
    s.param[i] = std::fma(-k.step_size, s.m[i] / denom, p);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AdamStep, EveryElementHasTheBitsOfTheReferenceSequence) {
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{29}, int64_t{40000}, int64_t{100003}}) {
    for (const auto& [decay, scale] : {std::pair{0.f, 1.f}, std::pair{0.01f, 1.f}, std::pair{0.f, 0.9999f}}) {
      const AdamScalars k{0.9f, 0.1f, 0.999f, 0.001f, 1e-3f / 0.271f, 0.0632f, 1e-8f, decay, scale};
      State got = random_state(n, static_cast<uint32_t>(n)), want = got;
      for (int step = 0; step < 3; ++step) {
        adam_step(got.param.data(), got.grad.data(), got.m.data(), got.v.data(), n, k);
        reference_step(want, k);
      }
      EXPECT_TRUE(same_bits(got.param, want.param)) << "n " << n << " decay " << decay << " scale " << scale;
      EXPECT_TRUE(same_bits(got.m, want.m)) << "n " << n << " decay " << decay << " scale " << scale;
      EXPECT_TRUE(same_bits(got.v, want.v)) << "n " << n << " decay " << decay << " scale " << scale;
    }
  }
}

}  // namespace
}  // namespace qkv::kernels
