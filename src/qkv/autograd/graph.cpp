#include "qkv/autograd/tape.h"

namespace qkv {

Var::Var(Tensor value, bool requires_grad, std::string name) : value_(std::move(value)) {
  if (requires_grad) {
    cell_ = std::make_shared<GradCell>();
    cell_->is_leaf = true;
    cell_->name = std::move(name);
  }
}

const Tensor& Var::grad() const {
  static const Tensor kUndefined;
  return cell_ ? cell_->grad : kUndefined;
}

void Var::zero_grad() {
  if (cell_ && cell_->grad.defined()) cell_->grad.zero();
}

const std::string& Var::name() const {
  static const std::string kEmpty;
  return cell_ ? cell_->name : kEmpty;
}

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

namespace {
Tape& root_tape() {
  thread_local Tape tape;
  return tape;
}
thread_local Tape* g_current = nullptr;
}  // namespace

Tape& Tape::current() { return g_current ? *g_current : root_tape(); }

TapeScope::TapeScope() : previous_(g_current) { g_current = &tape_; }
TapeScope::~TapeScope() { g_current = previous_; }

void Tape::clear() { nodes_.clear(); }

void Tape::backward(const Var& out, const Tensor& grad_out) {
  QKV_CHECK(out.requires_grad(), "backward: the output does not require grad (no parameter or input feeds it)");
  QKV_CHECK(grad_out.shape() == out.shape(),
            "backward: gradient " << grad_out.shape() << " does not match output " << out.shape());
  {
    Tensor seed = grad_out.contiguous();
    if (out.cell()->grad.defined()) {
      Tensor sum = out.cell()->grad.clone();
      const float* s = seed.f32();
      float* d = sum.f32();
      for (int64_t i = 0; i < sum.numel(); ++i) d[i] += s[i];
      out.cell()->grad = sum;
    } else {
      out.cell()->grad = seed.clone();
    }
  }
  // Walk backwards; free each node (and the gradient of its non-leaf output) once it has run.
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    Node& node = **it;
    if (node.out->grad.defined()) node.backward();
    if (!node.out->is_leaf) node.out->grad = Tensor();
    it->reset();
  }
  nodes_.clear();
}

void backward(const Var& out, const Tensor& grad_out) { Tape::current().backward(out, grad_out); }

void backward(const Var& loss) {
  QKV_CHECK(loss.value().numel() == 1, "backward: loss must have one element, got " << loss.value().describe());
  backward(loss, Tensor::full(loss.shape(), 1.f));
}

}  // namespace qkv
