// Grad mode and tape bookkeeping: NoGradGuard records nothing, backward empties the tape, leaf
// gradients survive backward and accumulate over calls, zero_grad zero-fills in place.
#include <gtest/gtest.h>

#include <random>

#include "ops/gradcheck.h"
#include "qkv/autograd/functions.h"
#include "qkv/autograd/graph.h"

namespace qkv::test {
namespace {

class GradMode : public ::testing::Test {
 protected:
  void SetUp() override { Graph::current().clear(); }
  void TearDown() override { Graph::current().clear(); }
  std::mt19937_64 rng{3};
};

// One of every differentiable op, chained the way a tiny decoder would: returns the scalar loss.
// Every intermediate is collected into `all` so the test can check each one's requires_grad.
Var tiny_model(const Var& table, const Var& w, const Var& b, const Var& ln_w, const Var& ln_b, std::vector<Var>* all) {
  auto keep = [&](Var v) {
    all->push_back(v);
    return v;
  };
  const Tensor ids = Tensor::from_ids({2, 3}, {1, 2, 0, 3, 3, 1});
  ops::AttentionMasks m;
  m.causal = true;
  m.query_keep = ops::keep_mask(ids, 0);
  Var x = keep(fn::embedding(table, ids));  // (2, 3, 4)
  x = keep(fn::add_positional(x, ops::sinusoidal_table(8, 4)));
  x = keep(fn::dropout(x, 0.1f, 1, 0));
  Var h = keep(fn::layernorm(x, ln_w, ln_b, 1e-5f));
  Var q = keep(fn::split_heads(keep(fn::linear(h, w, b)), 2));  // (2, 2, 3, 2)
  Var att = keep(fn::attention(q, q, q, m));
  Var s = keep(fn::softmax(keep(fn::masked_fill(keep(fn::matmul(q, q, true)), m))));
  Var att2 = keep(fn::reshape(keep(fn::matmul(s, q)), Dims{2, 2, 3, 2}));
  Var c = keep(fn::combine_heads(keep(fn::add(att, keep(fn::scale(att2, 0.5f))))));  // (2, 3, 4)
  Var y = keep(fn::gelu(keep(fn::relu(keep(fn::add(x, c))))));
  return keep(fn::cross_entropy(keep(fn::reshape(y, Dims{6, 4})), ids.reshape(Dims{6}), 0, 0.1f));
}

TEST_F(GradMode, NoGradGuardRecordsNothing) {
  Var table(randn({5, 4}, rng), true), w(randn({4, 4}, rng), true), b(randn({4}, rng), true);
  Var ln_w(randn({4}, rng), true), ln_b(randn({4}, rng), true);
  std::vector<Var> all;
  EXPECT_TRUE(grad_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled()) << "a nested guard must restore the outer (disabled) state";
    Var loss = tiny_model(table, w, b, ln_w, ln_b, &all);
    EXPECT_EQ(Graph::current().size(), 0u);
    EXPECT_FALSE(loss.requires_grad());
    for (size_t i = 0; i < all.size(); ++i) EXPECT_FALSE(all[i].requires_grad()) << "output #" << i;
    EXPECT_THROW(backward(loss), Error);  // nothing to differentiate
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(table.grad().defined());
  EXPECT_FALSE(w.grad().defined());

  // The same computation with grad on records, and backward leaves the tape empty.
  all.clear();
  Var loss = tiny_model(table, w, b, ln_w, ln_b, &all);
  EXPECT_GT(Graph::current().size(), 10u);
  EXPECT_TRUE(loss.requires_grad());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(all[i].requires_grad()) << "output #" << i;
  backward(loss);
  EXPECT_EQ(Graph::current().size(), 0u);
  for (const Var* p : {&table, &w, &b, &ln_w, &ln_b}) EXPECT_TRUE(p->grad().defined()) << p->name();
}

TEST_F(GradMode, InputsWithoutGradRecordNothing) {
  Var x(randn({2, 3}, rng)), w(randn({4, 3}, rng));
  Var y = fn::gelu(fn::linear(x, w, Var()));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(Graph::current().size(), 0u);
}

TEST_F(GradMode, BackwardEmptiesTapeAndLeafGradsAccumulateOverCalls) {
  Var x(randn({2, 3}, rng), true), w(randn({4, 3}, rng), true);
  const Tensor g = randn({2, 4}, rng);
  backward(fn::linear(x, w, Var()), g);
  EXPECT_EQ(Graph::current().size(), 0u);
  const std::vector<float> once = w.grad().to_vector();
  backward(fn::linear(x, w, Var()), g);  // a second step without zero_grad adds up
  const std::vector<float> twice = w.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]) << i;
}

TEST_F(GradMode, ZeroGradZeroFillsInPlace) {
  Var x(randn({2, 3}, rng), true), w(randn({4, 3}, rng), true);
  Var never(randn({3}, rng), true);
  backward(fn::linear(x, w, Var()), randn({2, 4}, rng));
  ASSERT_TRUE(w.grad().defined());
  const float* before = w.grad().f32();
  w.zero_grad();
  x.zero_grad();
  never.zero_grad();  // no gradient yet: stays undefined, does not throw
  EXPECT_FALSE(never.grad().defined());
  EXPECT_EQ(w.grad().f32(), before) << "zero_grad must keep the buffer";
  for (float v : w.grad().to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : x.grad().to_vector()) EXPECT_EQ(v, 0.f);
  // After zero_grad the next backward gives exactly the fresh gradient.
  const Tensor g = randn({2, 4}, rng);
  backward(fn::linear(x, w, Var()), g);
  Var w2(w.value().clone(), true);
  backward(fn::linear(Var(x.value()), w2, Var()), g);
  EXPECT_EQ(w.grad().to_vector(), w2.grad().to_vector());
}

TEST_F(GradMode, ClearDropsRecordedNodes) {
  Var x(randn({2, 3}, rng), true);
  Var y = fn::relu(fn::scale(x, 2.f));
  EXPECT_EQ(Graph::current().size(), 2u);
  Graph::current().clear();
  EXPECT_EQ(Graph::current().size(), 0u);
  (void)y;
}

}  // namespace
}  // namespace qkv::test
