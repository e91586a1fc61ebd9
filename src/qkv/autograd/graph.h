// The tape: reverse-mode autograd at the granularity of fused ops.
//
// Each differentiable op appends a Node to the current thread's tape during forward. backward()
// seeds the output gradient and walks the tape from the end: every node reads its output's
// gradient and accumulates into its inputs' gradient slots (so a Var used twice receives the sum).
// Nodes are destroyed as soon as they have run, freeing what they saved; the tape ends empty.
// Under NoGradGuard nothing is recorded (inference), and no activations are kept.
#pragma once
#include <memory>
#include <vector>

#include "qkv/autograd/var.h"

namespace qkv {

struct Node {
  virtual ~Node() = default;
  virtual void backward() = 0;
  std::shared_ptr<GradCell> out;  // the output whose gradient this node propagates
};

class Tape {
 public:
  // The innermost active tape of this thread (see TapeScope).
  static Tape& current();
  void record(std::unique_ptr<Node> node) { nodes_.push_back(std::move(node)); }
  size_t size() const { return nodes_.size(); }
  // Drops everything recorded (e.g. after an evaluation pass that recorded by mistake).
  void clear();
  // Runs backward from `out` with d(out) = grad_out (same shape as out).
  void backward(const Var& out, const Tensor& grad_out);

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Makes a fresh tape current for its lifetime (used by checkpoint to replay a segment).
class TapeScope {
 public:
  TapeScope();
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape tape_;
  Tape* previous_;
};

// Backward of a scalar (1-element) loss: d(loss) = 1.
void backward(const Var& loss);
void backward(const Var& out, const Tensor& grad_out);

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
  Tape::current().record(std::move(node));
  return result;
}

}  // namespace qkv
