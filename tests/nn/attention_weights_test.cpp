// MultiHeadAttention::attention_weights (seed 003's scaled_dot_product_attention returns them):
// rows are distributions, masked keys get exactly 0, and weighting the projected values by them
// reproduces forward() exactly up to float summation order.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/nn/attention.h"

namespace qkv::nn {
namespace {

Tensor random_tensor(const Dims& shape, uint64_t seed) {
  Generator gen(seed);
  std::mt19937_64 eng = gen.engine();
  std::normal_distribution<float> dist(0.f, 1.f);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(eng);
  return t;
}

TEST(AttentionWeights, AreTheDistributionsForwardUses) {
  Generator gen(4);
  MultiHeadAttention attn(12, 3, gen);
  attn.eval();
  const int64_t B = 2, Tq = 4, Tk = 5, H = 3, dk = 4;
  const Var Q(random_tensor(Dims{B, Tq, 12}, 1)), K(random_tensor(Dims{B, Tk, 12}, 2));
  ops::AttentionMasks masks;
  masks.key_keep = Tensor::zeros(Dims{B, Tk}, DType::I32);
  for (int64_t j = 0; j < Tk; ++j) {
    masks.key_keep.i32()[j] = 1;                   // row 0: every key
    masks.key_keep.i32()[Tk + j] = j < 3 ? 1 : 0;  // row 1: the last two keys are padding
  }
  NoGradGuard no_grad;
  const Tensor w = attn.attention_weights(Q, K, masks);
  ASSERT_EQ(w.shape(), (Dims{B, H, Tq, Tk}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          const float p = w.f32()[((b * H + h) * Tq + i) * Tk + j];
          if (b == 1 && j >= 3) {
            EXPECT_EQ(p, 0.f);
          }
          sum += p;
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
  // out = W_o(combine_heads(w @ v)) must be forward()'s output.
  const Tensor v = attn.project(attn.W_v, K).value().contiguous();  // (B, H, Tk, dk)
  Tensor weighted = Tensor::zeros(Dims{B, H, Tq, dk});
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t d = 0; d < dk; ++d)
          weighted.f32()[(bh * Tq + i) * dk + d] += w.f32()[(bh * Tq + i) * Tk + j] * v.f32()[(bh * Tk + j) * dk + d];
  const Tensor expected = attn.forward(Q, K, K, masks).value();
  const Tensor got = attn.W_o.forward(fn::combine_heads(Var(weighted))).value();
  ASSERT_EQ(got.shape(), expected.shape());
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.f32()[i], expected.f32()[i], 1e-5f) << i;
}

}  // namespace
}  // namespace qkv::nn
