#include "qkv/autograd/checkpoint.h"

#include "qkv/autograd/functions.h"

namespace qkv::fn {

Var checkpoint(const std::function<Var(const Var&)>& f, const Var& x, const std::vector<Var>& params) {
  if (!grad_enabled()) return f(x);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = f(Var(x.value())).value();
  }
  // Recorded even if x needs no gradient: the parameters inside f do.
  return record_op(std::move(y), true, [f, xv = x.value(), xc = x.cell(), params](const Tensor& dy) {
    Graph replay;  // a graph of its own: the outer graph is mid-walk
    const GraphScope scope(replay);
    Var input(xv, /*requires_grad=*/xc != nullptr);
    const Var out = f(input);
    replay.backward(out, dy);
    if (xc) accumulate_grad(xc, input.grad());  // input dies here: its buffer can be handed on
  });
}

}  // namespace qkv::fn
