// ops::adam_step_many (the optimizer's step over every parameter at once; on a GPU a few launches)
// gives each parameter the bits of its own adam_step call, with each one's AdamW decay factor.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

Tensor uniform_tensor(const Dims& shape, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(gen);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), static_cast<size_t>(a.nbytes())) == 0;
}

TEST(AdamStepMany, EachParameterGetsTheBitsOfItsOwnStep) {
  const std::vector<Dims> shapes = {Dims{7}, Dims{33, 17}, Dims{1}, Dims{4, 5, 6}, Dims{1000}};
  const AdamScalars s{0.9f, 0.1f, 0.999f, 0.001f, 1e-3f, 0.0316f, 1e-8f, 0.01f};
  std::vector<Tensor> p_one, p_many, m_one, m_many, v_one, v_many, grads;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor p = uniform_tensor(shapes[i], 10 + static_cast<uint32_t>(i), 1.f);
    grads.push_back(uniform_tensor(shapes[i], 20 + static_cast<uint32_t>(i), 1e-2f));
    p_one.push_back(p.clone());
    p_many.push_back(p.clone());
    for (auto* moments : {&m_one, &m_many, &v_one, &v_many}) moments->push_back(Tensor::zeros(shapes[i]));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<AdamTensors> all;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const float decay = i % 2 ? 0.99f : 1.f;  // AdamW decays some parameters only
      AdamScalars own = s;
      own.param_scale = decay;
      adam_step(p_one[i], grads[i], m_one[i], v_one[i], own);
      all.push_back({&p_many[i], &grads[i], &m_many[i], &v_many[i], decay});
    }
    adam_step_many(all, s);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(same_bits(p_one[i], p_many[i])) << "parameter " << i;
    EXPECT_TRUE(same_bits(m_one[i], m_many[i])) << "first moment " << i;
    EXPECT_TRUE(same_bits(v_one[i], v_many[i])) << "second moment " << i;
  }
  EXPECT_FALSE(same_bits(p_one[0], uniform_tensor(shapes[0], 10, 1.f))) << "the step changed nothing";
}

TEST(AdamStepMany, RefusesAMomentOfAnotherShapeNamingIt) {
  Tensor p = Tensor::zeros(Dims{4}), g = Tensor::zeros(Dims{4}), m = Tensor::zeros(Dims{4}), v = Tensor::zeros(Dims{5});
  const AdamScalars s{0.9f, 0.1f, 0.999f, 0.001f, 1e-3f, 0.0316f, 1e-8f, 0.f};
  try {
    adam_step_many({AdamTensors{&p, &g, &m, &v, 1.f}}, s);
    FAIL() << "a second moment of 5 elements for a parameter of 4 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_step: shapes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv::ops
