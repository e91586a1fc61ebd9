#include "qkv/autograd/graph.h"

#include "qkv/ops/ops.h"

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
Graph& default_graph() {
  thread_local Graph graph;
  return graph;
}
thread_local Graph* g_current = nullptr;

void seed_gradient(const Var& out, const Tensor& grad_out) {
  Tensor seed = grad_out.contiguous();
  if (out.cell()->grad.defined()) {
    Tensor sum = out.cell()->grad.clone();
    ops::add_inplace(sum, seed);
    out.cell()->grad = sum;
  } else {
    out.cell()->grad = seed.clone();
  }
}

thread_local const std::function<void()>* g_backward_hook = nullptr;

// Walks `nodes` backwards; frees each node (and the gradient of its non-leaf output) once it has run.
void run_backward(detail::GraphNodes& graph) {
  std::vector<std::unique_ptr<Node>>& nodes = graph.nodes;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node& node = **it;
    if (node.out->grad.defined()) node.backward();
    if (!node.out->is_leaf) node.out->grad = Tensor();
    it->reset();
    if (g_backward_hook) (*g_backward_hook)();
  }
  nodes.clear();
}

void check_output(const Var& out, const Tensor& grad_out) {
  QKV_CHECK(out.requires_grad(), "backward: the output does not require grad (no parameter or input feeds it)");
  QKV_CHECK(grad_out.shape() == out.shape(),
            "backward: gradient " << grad_out.shape() << " does not match output " << out.shape());
}
}  // namespace

Graph& Graph::current() { return g_current ? *g_current : default_graph(); }

void Graph::record(std::unique_ptr<Node> node) {
  node->out->graph = nodes_;
  nodes_->nodes.push_back(std::move(node));
}

BackwardHookScope::BackwardHookScope(const std::function<void()>* hook) : previous_(g_backward_hook) {
  g_backward_hook = hook;
}
BackwardHookScope::~BackwardHookScope() { g_backward_hook = previous_; }

GraphScope::GraphScope(Graph& graph) : previous_(g_current) { g_current = &graph; }
GraphScope::~GraphScope() { g_current = previous_; }

void Graph::backward(const Var& out, const Tensor& grad_out) {
  check_output(out, grad_out);
  QKV_CHECK(out.cell()->is_leaf || out.cell()->graph.lock() == nodes_,
            "backward: this value was recorded by another graph (or its graph was already run)");
  seed_gradient(out, grad_out);
  run_backward(*nodes_);
}

void Graph::backward(const Var& loss) {
  QKV_CHECK(loss.value().numel() == 1, "backward: loss must have one element, got " << loss.value().describe());
  backward(loss, Tensor::full(loss.shape(), 1.f).to(loss.value().device()));
}

void backward(const Var& out, const Tensor& grad_out) {
  check_output(out, grad_out);
  if (out.cell()->is_leaf) {
    seed_gradient(out, grad_out);
    return;
  }
  const std::shared_ptr<detail::GraphNodes> graph = out.cell()->graph.lock();
  QKV_CHECK(graph, "backward: the graph that recorded this value no longer exists");
  seed_gradient(out, grad_out);
  run_backward(*graph);
}

void backward(const Var& loss) {
  QKV_CHECK(loss.value().numel() == 1, "backward: loss must have one element, got " << loss.value().describe());
  backward(loss, Tensor::full(loss.shape(), 1.f).to(loss.value().device()));
}

}  // namespace qkv
