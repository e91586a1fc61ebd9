// An intermediate's first gradient shares its producer's buffer (fn::accumulate_grad) instead of a
// copy: gradients stay right when a shared slot is added into later (it gets a buffer of its own
// first), leaves never share, and slices of larger buffers are copied.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "qkv/autograd/functions.h"

namespace qkv {
namespace {

Tensor random_tensor(const Dims& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(gen);
  return t;
}

void expect_scaled(const Tensor& got, const Tensor& g, float factor, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), g.shape()) << what;
  for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(got.f32()[i], factor * g.f32()[i]) << what << ", element " << i;
}

// z = (a + b) + a with a = x * 1 and b = x * 1: z's add hands dz to y and to a (both sharing it),
// then y's add adds dz into a's shared slot. Writing there in place would also change y's gradient
// and b's, and x would receive 4 dz instead of 3 dz.
TEST(SharedGradients, AddingIntoASharedSlotLeavesTheOthersAlone) {
  const Tensor g = random_tensor(Dims{4, 6}, 1);
  Var x(random_tensor(Dims{4, 6}, 2), /*requires_grad=*/true);
  const Var a = fn::scale(x, 1.f), b = fn::scale(x, 1.f);
  const Var y = fn::add(a, b);
  const Var z = fn::add(y, a);
  backward(z, g);
  expect_scaled(x.grad(), g, 3.f, "x");
  // The seed gradient is the caller's: never written into.
  expect_scaled(g, random_tensor(Dims{4, 6}, 1), 1.f, "the seed gradient");
}

// The same through the ops that hand on views or reshaped gradients (reshape, split and combine
// heads, a positional add), each feeding a slot that a later op adds into.
TEST(SharedGradients, ViewsAndReshapesFeedingSlotsThatAreAddedInto) {
  const Tensor g = random_tensor(Dims{2, 3, 8}, 3);
  const Tensor table = Tensor::zeros(Dims{3, 8});
  Var x(random_tensor(Dims{2, 3, 8}, 4), /*requires_grad=*/true);
  const Var a = fn::scale(x, 2.f);                             // d/dx 2
  const Var heads = fn::combine_heads(fn::split_heads(a, 2));  // identity on a
  const Var flat = fn::reshape(fn::add_positional(heads, table), Dims{6, 8});
  const Var back = fn::reshape(flat, Dims{2, 3, 8});
  const Var y = fn::add(fn::add(back, a), fn::relu(a));  // d/da 2 + (a > 0)
  backward(y, g);
  const Tensor xv = x.value();
  for (int64_t i = 0; i < g.numel(); ++i) {
    const float da = g.f32()[i] + g.f32()[i] + (2.f * xv.f32()[i] > 0 ? g.f32()[i] : 0.f);
    ASSERT_FLOAT_EQ(x.grad().f32()[i], 2.f * da) << "element " << i;
  }
}

// Leaves keep buffers of their own: optimizers, clipping and zero_grad write into them in place.
TEST(SharedGradients, LeavesNeverShareABuffer) {
  const Tensor g = random_tensor(Dims{5}, 5);
  Var p(random_tensor(Dims{5}, 6), /*requires_grad=*/true), q(random_tensor(Dims{5}, 7), /*requires_grad=*/true);
  backward(fn::add(p, q), g);
  p.zero_grad();
  expect_scaled(q.grad(), g, 1.f, "q after p.zero_grad()");
  expect_scaled(g, random_tensor(Dims{5}, 5), 1.f, "the seed gradient");
}

// The first gradient of an intermediate is dy's buffer itself; a second one is added into a buffer
// of the slot's own, leaving dy as it was; a leaf's first gradient is a copy.
TEST(SharedGradients, AnIntermediatesFirstGradientIsTheBufferItself) {
  const Tensor dy = random_tensor(Dims{16, 32}, 8);
  const std::vector<float> before = dy.to_vector();
  auto intermediate = std::make_shared<GradCell>();
  fn::accumulate_grad(intermediate, dy);
  EXPECT_EQ(intermediate->grad.f32(), dy.f32()) << "no copy for an intermediate's first gradient";
  fn::accumulate_grad(intermediate, dy);
  EXPECT_NE(intermediate->grad.f32(), dy.f32());
  EXPECT_EQ(dy.to_vector(), before) << "adding into a shared slot wrote into the buffer it shared";
  for (int64_t i = 0; i < dy.numel(); ++i) ASSERT_EQ(intermediate->grad.f32()[i], 2 * before[i]);

  auto leaf = std::make_shared<GradCell>();
  leaf->is_leaf = true;
  fn::accumulate_grad(leaf, dy);
  EXPECT_NE(leaf->grad.f32(), dy.f32()) << "a leaf's gradient must be a buffer of its own";
  EXPECT_EQ(leaf->grad.to_vector(), before);

  // A slice of a larger buffer is copied: holding it would keep the whole buffer alive.
  const Tensor big = random_tensor(Dims{64, 32}, 9);
  auto from_slice = std::make_shared<GradCell>();
  fn::accumulate_grad(from_slice, big.slice0(0, 16));
  EXPECT_NE(from_slice->grad.f32(), big.f32());
}

}  // namespace
}  // namespace qkv
