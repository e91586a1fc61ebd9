// The autograd graph: reverse-mode differentiation at the granularity of fused ops.
//
// A Graph owns the nodes recorded while it is current: each differentiable op appends a Node
// during forward, and every output Var remembers the graph that recorded it. Graph::backward seeds
// the output gradient and walks the graph's nodes from the end: each node reads its output's
// gradient and accumulates into its inputs' gradient slots (so a Var used twice receives the sum).
// Nodes are destroyed as soon as they have run, freeing what they saved; the graph ends empty.
// One graph's backward never touches another graph's nodes.
//
// The caller owns the graph it trains with and makes it current with a GraphScope:
//     Graph graph;
//     GraphScope scope(graph);
//     Var loss = ...;        // recorded into `graph`
//     graph.backward(loss);
// Without a GraphScope, ops record into this thread's default graph (convenient in tests and
// short scripts). Under NoGradGuard nothing is recorded (inference), and no activations are kept.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "qkv/autograd/var.h"

namespace qkv {

struct Node {
  virtual ~Node() = default;
  virtual void backward() = 0;
  std::shared_ptr<GradCell> out;  // the output whose gradient this node propagates
};

namespace detail {
struct GraphNodes {
  std::vector<std::unique_ptr<Node>> nodes;
};
}  // namespace detail

class Graph {
 public:
  Graph() : nodes_(std::make_shared<detail::GraphNodes>()) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // The graph ops record into on this thread: the innermost GraphScope's, else the default graph.
  static Graph& current();
  void record(std::unique_ptr<Node> node);
  size_t size() const { return nodes_->nodes.size(); }
  // Drops everything recorded (e.g. after an evaluation pass that recorded by mistake).
  void clear() { nodes_->nodes.clear(); }
  // Runs backward from `out` (which this graph recorded, or a leaf) with d(out) = grad_out.
  void backward(const Var& out, const Tensor& grad_out);
  // Backward of a scalar (1-element) loss: d(loss) = 1.
  void backward(const Var& loss);

 private:
  std::shared_ptr<detail::GraphNodes> nodes_;
};

// Makes `graph` the one ops record into on this thread for the scope's lifetime.
class GraphScope {
 public:
  explicit GraphScope(Graph& graph);
  ~GraphScope();
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;

 private:
  Graph* previous_;
};

// Backward through the graph that recorded `out` (see Var::cell()->graph).
// Backward of a scalar (1-element) loss: d(loss) = 1.
void backward(const Var& loss);
void backward(const Var& out, const Tensor& grad_out);

// While one lives on a thread, `hook` runs after every node that backward runs there (nested graphs
// included), once the node is destroyed: the data-parallel trainer uses it to start all-reducing a
// bucket of gradients as soon as no pending node refers to its parameters.
class BackwardHookScope {
 public:
  explicit BackwardHookScope(const std::function<void()>* hook);
  ~BackwardHookScope();
  BackwardHookScope(const BackwardHookScope&) = delete;
  BackwardHookScope& operator=(const BackwardHookScope&) = delete;

 private:
  const std::function<void()>* previous_;
};

bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Creates the output Var of an op and records `backward_fn` if any input requires grad and
// grad mode is on; otherwise returns a plain value. backward_fn(out_grad) receives d(output).
template <class F>
Var record_op(Tensor value, bool any_input_requires_grad, F backward_fn) {
  if (!any_input_requires_grad || !grad_enabled()) return Var(std::move(value), std::shared_ptr<GradCell>());
  struct FnNode final : Node {
    explicit FnNode(F f) : fn(std::move(f)) {}
    void backward() override { fn(static_cast<const Tensor&>(out->grad)); }
    F fn;
  };
  auto node = std::make_unique<FnNode>(std::move(backward_fn));
  node->out = std::make_shared<GradCell>();
  Var result(std::move(value), node->out);
  Graph::current().record(std::move(node));
  return result;
}

}  // namespace qkv
