#include "qkv/kernels/elementwise.h"

#include <cmath>

#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

void accumulate(const Tensor& dy_in, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  if (prepare_slot(dx, dy.shape()))
    kernels::add_inplace(dx->f32(), dy.f32(), dy.numel());
  else
    dx->copy_from(dy);
}

Tensor add_forward(const Tensor& a_in, const Tensor& b_in) {
  QKV_CHECK(a_in.shape() == b_in.shape(), "add: shapes " << a_in.shape() << " and " << b_in.shape() << " differ");
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = Tensor::empty(a.shape());
  kernels::add(y.f32(), a.f32(), b.f32(), a.numel());
  return y;
}

Tensor scale_forward(const Tensor& x_in, float s) {
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  kernels::scale(y.f32(), x.f32(), s, x.numel());
  return y;
}

void scale_backward(const Tensor& dy_in, float s, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  if (prepare_slot(dx, dy.shape()))
    kernels::axpy(dx->f32(), dy.f32(), s, dy.numel());
  else
    kernels::scale(dx->f32(), dy.f32(), s, dy.numel());
}

Tensor relu_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  kernels::relu_forward(y.f32(), x.f32(), x.numel());
  return y;
}

void relu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "relu backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape());
  kernels::relu_backward(dx->f32(), dy.f32(), x.f32(), x.numel(), acc);
}

// Scalar loops: tanh serves BERT's pooler, (B, D) values per batch, far from any hot path.
Tensor tanh_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.f32()[i] = std::tanh(x.f32()[i]);
  return y;
}

void tanh_backward(const Tensor& dy_in, const Tensor& y_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == y_in.shape(), "tanh backward: grad " << dy_in.shape() << " vs output " << y_in.shape());
  const Tensor dy = dy_in.contiguous(), y = y_in.contiguous();
  const bool acc = prepare_slot(dx, y.shape());
  float* out = dx->f32();
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float v = y.f32()[i], g = dy.f32()[i] * (1.f - v * v);
    out[i] = acc ? out[i] + g : g;
  }
}

Tensor gelu_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  kernels::gelu_forward(y.f32(), x.f32(), x.numel());
  return y;
}

void gelu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "gelu backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape());
  kernels::gelu_backward(dx->f32(), dy.f32(), x.f32(), x.numel(), acc);
}

Tensor gelu_tanh_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  kernels::gelu_tanh_forward(y.f32(), x.f32(), x.numel());
  return y;
}

void gelu_tanh_backward(const Tensor& dy_in, const Tensor& x_in, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == x_in.shape(),
            "gelu_tanh backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const bool acc = prepare_slot(dx, x.shape());
  kernels::gelu_tanh_backward(dx->f32(), dy.f32(), x.f32(), x.numel(), acc);
}

Tensor dropout_forward(const Tensor& x_in, float p, uint64_t seed, uint64_t offset) {
  QKV_CHECK(p >= 0.f && p < 1.f, "dropout: probability " << p << " outside [0, 1)");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  kernels::dropout_forward(y.f32(), x.f32(), x.numel(), p, seed, offset);
  return y;
}

void dropout_backward(const Tensor& dy_in, float p, uint64_t seed, uint64_t offset, Tensor* dx) {
  const Tensor dy = dy_in.contiguous();
  const bool acc = prepare_slot(dx, dy.shape());
  kernels::dropout_backward(dx->f32(), dy.f32(), dy.numel(), p, seed, offset, acc);
}

}  // namespace qkv::ops
