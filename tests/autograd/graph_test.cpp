// Graph ownership: a graph's backward runs its own nodes only, refuses an output another graph
// recorded, and says so when the graph that recorded an output is gone.
#include <gtest/gtest.h>

#include "qkv/autograd/functions.h"

namespace qkv {
namespace {

Tensor ones(const Dims& shape) { return Tensor::full(shape, 1.f); }

TEST(Graph, BackwardRunsOnlyItsOwnNodes) {
  Var w(Tensor::full(Dims{3}, 2.f), /*requires_grad=*/true, "w");
  Graph a, b;
  Var out_a, out_b;
  {
    const GraphScope scope(a);
    out_a = fn::scale(w, 3.f);  // d/dw = 3
  }
  {
    const GraphScope scope(b);
    out_b = fn::scale(w, 5.f);  // d/dw = 5
  }
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 1u);
  a.backward(out_a, ones(Dims{3}));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 1u) << "a's backward must not touch b's nodes";
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3, 3, 3}));
  backward(out_b, ones(Dims{3}));  // the free function finds the graph that recorded out_b
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{8, 8, 8}));
}

TEST(Graph, RefusesAnOutputOfAnotherGraphAndAGoneGraph) {
  Var w(Tensor::full(Dims{2}, 1.f), true, "w");
  Graph a;
  Var out_other;
  {
    Graph b;
    const GraphScope scope(b);
    out_other = fn::scale(w, 2.f);
    try {
      a.backward(out_other, ones(Dims{2}));
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("recorded by another graph"), std::string::npos) << e.what();
    }
  }
  try {
    backward(out_other, ones(Dims{2}));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer exists"), std::string::npos) << e.what();
  }
}

TEST(Graph, ScopesNestAndRestore) {
  Var w(Tensor::full(Dims{1}, 1.f), true, "w");
  Graph outer, inner;
  const GraphScope s1(outer);
  EXPECT_EQ(&Graph::current(), &outer);
  {
    const GraphScope s2(inner);
    EXPECT_EQ(&Graph::current(), &inner);
    (void)fn::scale(w, 1.f);
  }
  EXPECT_EQ(&Graph::current(), &outer);
  EXPECT_EQ(inner.size(), 1u);
  EXPECT_EQ(outer.size(), 0u);
}

}  // namespace
}  // namespace qkv
