// Var: a tensor value plus, when it takes part in differentiation, a gradient cell.
//
// The value and the gradient are held separately on purpose: the tape keeps a Var's gradient
// cell alive until backward, but its value only if some op's backward saved it. Intermediate
// activations that no backward needs are freed as soon as the forward pass drops them.
#pragma once
#include <memory>
#include <string>

#include "qkv/core/tensor.h"

namespace qkv {

namespace detail {
struct GraphNodes;
}

struct GradCell {
  Tensor grad;           // undefined until a gradient arrives; then accumulated into
  bool is_leaf = false;  // parameters and user inputs keep their grad after backward
  std::string name;
  std::weak_ptr<detail::GraphNodes> graph;  // the graph that recorded the op producing it (non-leaves)
};

class Var {
 public:
  Var() = default;
  // A leaf. With requires_grad it collects a gradient in backward (a parameter, or an input under test).
  explicit Var(Tensor value, bool requires_grad = false, std::string name = "");
  // An op's output: value plus the cell the op's backward node reads the output gradient from.
  Var(Tensor value, std::shared_ptr<GradCell> cell) : value_(std::move(value)), cell_(std::move(cell)) {}

  bool defined() const { return value_.defined(); }
  const Tensor& value() const { return value_; }
  Tensor& value() { return value_; }
  const Dims& shape() const { return value_.shape(); }
  int64_t size(int d) const { return value_.size(d); }
  bool requires_grad() const { return cell_ != nullptr; }

  // Undefined tensor if no gradient has arrived (or the Var does not require grad).
  const Tensor& grad() const;
  // The slot an op's backward accumulates into; nullptr when no gradient is wanted.
  Tensor* grad_slot() const { return cell_ ? &cell_->grad : nullptr; }
  const std::shared_ptr<GradCell>& cell() const { return cell_; }
  // Zero-fills the gradient in place (keeps the buffer, so the next step allocates nothing).
  void zero_grad();
  const std::string& name() const;

 private:
  Tensor value_;
  std::shared_ptr<GradCell> cell_;
};

}  // namespace qkv
