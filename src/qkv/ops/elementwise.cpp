#include "qkv/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

namespace {
// An activation's backward that reads its input x: a float32 x through `kernel` on x's device, or a
// bf16 x (saved_for_backward in bf16 precision; CPU only) through `cpu_kernel`, widened a chunk at a
// time on each thread (kernels::activation_backward_bf16_input), so that no float32 copy of the
// whole input comes back.
template <class Kernel>
void activation_backward(const Tensor& dy, const Tensor& x, Tensor* dx, bool acc, Kernel kernel,
                         kernels::ActivationBackward cpu_kernel) {
  if (x.dtype() != DType::BF16) return kernel(dx->f32(), dy.f32(), x.f32(), x.numel(), acc);
  QKV_CHECK(!on_cuda(x), "activation backward: a bf16 input is kept on the CPU only");
  kernels::activation_backward_bf16_input(cpu_kernel, dx->f32(), dy.f32(),
                                          reinterpret_cast<const uint16_t*>(x.data<bfloat16>()), x.numel(), acc);
}
}  // namespace

Tensor saved_for_backward(const Tensor& x, Precision precision) {
  if (precision != Precision::BF16 || on_cuda(x) || x.dtype() != DType::F32) return x;
  return x.to(DType::BF16);
}

void accumulate(const Tensor& dy_in, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  if (prepare_slot(dx, dy.shape(), dy.device()))
    QKV_KERNEL(dy, add_inplace(dx->f32(), dy.f32(), dy.numel()));
  else
    dx->copy_from(dy);
}

Tensor add_forward(const Tensor& a_in, const Tensor& b_in) {
  QKV_CHECK(a_in.shape() == b_in.shape(), "add: shapes " << a_in.shape() << " and " << b_in.shape() << " differ");
  check_same_device("add", {&a_in, &b_in});
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = empty_like_device(a.shape(), a);
  QKV_KERNEL(a, add(y.f32(), a.f32(), b.f32(), a.numel()));
  return y;
}

Tensor mul_forward(const Tensor& a_in, const Tensor& b_in) {
  QKV_CHECK(a_in.shape() == b_in.shape(), "mul: shapes " << a_in.shape() << " and " << b_in.shape() << " differ");
  check_same_device("mul", {&a_in, &b_in});
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = empty_like_device(a.shape(), a);
  QKV_KERNEL(a, mul(y.f32(), a.f32(), b.f32(), a.numel()));
  return y;
}

void mul_backward(const Tensor& dy_in, const Tensor& a_in, const Tensor& b_in, Tensor* da, Tensor* db) {
  QKV_CHECK(dy_in.shape() == a_in.shape() && a_in.shape() == b_in.shape(),
            "mul backward: grad " << dy_in.shape() << " vs inputs " << a_in.shape() << " and " << b_in.shape());
  check_same_device("mul backward", {&dy_in, &a_in, &b_in});
  const Tensor dy = dy_in.contiguous(), a = a_in.contiguous(), b = b_in.contiguous();
  // d(a b)/da = b and d(a b)/db = a: each factor's gradient is dy times the other.
  const auto factor_grad = [&](Tensor* d, const Tensor& other) {
    if (!d) return;
    const bool acc = prepare_slot(d, other.shape(), other.device());
    QKV_KERNEL(other, mul_backward(d->f32(), dy.f32(), other.f32(), other.numel(), acc));
  };
  factor_grad(da, b);
  factor_grad(db, a);
}

Tensor scale_forward(const Tensor& x_in, float s) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  QKV_KERNEL(x, scale(y.f32(), x.f32(), s, x.numel()));
  return y;
}

void scale_backward(const Tensor& dy_in, float s, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  if (prepare_slot(dx, dy.shape(), dy.device()))
    QKV_KERNEL(dy, axpy(dx->f32(), dy.f32(), s, dy.numel()));
  else
    QKV_KERNEL(dy, scale(dx->f32(), dy.f32(), s, dy.numel()));
}

Tensor relu_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  QKV_KERNEL(x, relu_forward(y.f32(), x.f32(), x.numel()));
  return y;
}

void relu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "relu backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  check_same_device("relu backward", {&dy_in, &x_in});
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape(), x.device());
  QKV_KERNEL(x, relu_backward(dx->f32(), dy.f32(), x.f32(), x.numel(), acc));
}

namespace {
// Scalar loops on the CPU: tanh serves BERT's pooler, (B, D) values per batch, far from any hot path.
void tanh_forward_cpu(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
void tanh_backward_cpu(float* dx, const float* dy, const float* y, int64_t n, bool acc) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i] * (1.f - y[i] * y[i]);
    dx[i] = acc ? dx[i] + g : g;
  }
}
}  // namespace

Tensor tanh_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  if (on_cuda(x)) {
    if constexpr (cuda::kBuilt) kernels::cuda::tanh_forward(y.f32(), x.f32(), x.numel());
  } else {
    tanh_forward_cpu(y.f32(), x.f32(), x.numel());
  }
  return y;
}

void tanh_backward(const Tensor& dy_in, const Tensor& y_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == y_in.shape(), "tanh backward: grad " << dy_in.shape() << " vs output " << y_in.shape());
  check_same_device("tanh backward", {&dy_in, &y_in});
  const Tensor dy = dy_in.contiguous(), y = y_in.contiguous();
  const bool acc = prepare_slot(dx, y.shape(), y.device());
  if (on_cuda(y)) {
    if constexpr (cuda::kBuilt) kernels::cuda::tanh_backward(dx->f32(), dy.f32(), y.f32(), y.numel(), acc);
  } else {
    tanh_backward_cpu(dx->f32(), dy.f32(), y.f32(), y.numel(), acc);
  }
}

// In bf16 precision on the CPU, GELU and GELU-tanh and their derivatives take float steps alone:
// the result is rounded to bf16 for the next product, and the backward's input is kept in bf16
// already (kernels/gelu_lanes.h says by how much they differ from the kernels good to a few ulps).
namespace {
bool gelu_in_float_steps(const Tensor& x) { return product_precision() == Precision::BF16 && !on_cuda(x); }
}  // namespace

Tensor gelu_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  if (gelu_in_float_steps(x))
    kernels::gelu_forward_to_quantize(y.f32(), x.f32(), x.numel());
  else
    QKV_KERNEL(x, gelu_forward(y.f32(), x.f32(), x.numel()));
  return y;
}

void gelu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "gelu backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  check_same_device("gelu backward", {&dy_in, &x_in});
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape(), x.device());
  activation_backward(dy, x, dx, acc, [&](float* d, const float* g, const float* in, int64_t n, bool a) {
    QKV_KERNEL(x, gelu_backward(d, g, in, n, a));
  }, kernels::gelu_backward_for_bf16);
}

Tensor silu_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  QKV_KERNEL(x, silu_forward(y.f32(), x.f32(), x.numel()));
  return y;
}

void silu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "silu backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  check_same_device("silu backward", {&dy_in, &x_in});
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape(), x.device());
  activation_backward(dy, x, dx, acc, [&](float* d, const float* g, const float* in, int64_t n, bool a) {
    QKV_KERNEL(x, silu_backward(d, g, in, n, a));
  }, kernels::silu_backward);
}

Tensor gelu_tanh_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  if (gelu_in_float_steps(x))
    kernels::gelu_tanh_forward_for_bf16(y.f32(), x.f32(), x.numel());
  else
    QKV_KERNEL(x, gelu_tanh_forward(y.f32(), x.f32(), x.numel()));
  return y;
}

void gelu_tanh_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(),
            "gelu_tanh backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  check_same_device("gelu_tanh backward", {&dy_in, &x_in});
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape(), x.device());
  activation_backward(dy, x, dx, acc, [&](float* d, const float* g, const float* in, int64_t n, bool a) {
    QKV_KERNEL(x, gelu_tanh_backward(d, g, in, n, a));
  }, kernels::gelu_tanh_backward_for_bf16);
}

Tensor dropout_forward(const Tensor& x_in, float p, uint64_t seed, uint64_t offset) {
  QKV_CHECK(p >= 0.f && p < 1.f, "dropout: probability " << p << " outside [0, 1)");
  const Tensor x = x_in.contiguous();
  Tensor y = empty_like_device(x.shape(), x);
  QKV_KERNEL(x, dropout_forward(y.f32(), x.f32(), x.numel(), p, seed, offset));
  return y;
}

void dropout_backward(const Tensor& dy_in, float p, uint64_t seed, uint64_t offset, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  const bool acc = prepare_slot(dx, dy.shape(), dy.device());
  QKV_KERNEL(dy, dropout_backward(dx->f32(), dy.f32(), dy.numel(), p, seed, offset, acc));
}

}  // namespace qkv::ops
