#include <cmath>

#include "qkv/kernels/layernorm.h"
#include "qkv/kernels/softmax.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {
// The layernorm kernels always compute dx, dweight and dbias: the gradients nobody asked for go
// to scratch tensors; dweight / dbias are accumulated into, dx is written or accumulated.
struct GradSlots {
  Tensor scratch_x, scratch_w, scratch_b;
  Tensor *dx, *dw, *db;
  bool accumulate_dx;
  GradSlots(Tensor* dx_in, Tensor* dw_in, Tensor* db_in, const Dims& x_shape, const Dims& w_shape, Device device)
      : dx(dx_in ? dx_in : &scratch_x), dw(dw_in ? dw_in : &scratch_w), db(db_in ? db_in : &scratch_b) {
    prepare_zeroed_slot(dw, w_shape, device);
    prepare_zeroed_slot(db, w_shape, device);
    accumulate_dx = prepare_slot(dx, x_shape, device);
  }
};

// The normalised dim C of input x for a forward named `op`, after checking x, weight and bias.
int64_t checked_norm_dim(const Tensor& x, const Tensor& weight, const Tensor& bias, LayerNormVariant variant,
                         const char* op) {
  QKV_CHECK(x.dim() >= 1, op << ": input must have at least one dim, got " << x.shape());
  const int64_t C = x.size(-1);
  if (variant == LayerNormVariant::RMS) {
    QKV_CHECK(!bias.defined(), op << " (RMS): T5's RMSNorm has no bias; pass an undefined bias Tensor, got bias "
                                  << bias.shape());
    QKV_CHECK(weight.shape() == Dims{C},
              op << " (RMS): input " << x.shape() << " needs weight (" << C << "), got " << weight.shape());
    return C;
  }
  QKV_CHECK(weight.shape() == Dims{C} && bias.shape() == Dims{C},
            op << ": input " << x.shape() << " needs weight and bias (" << C << "), got " << weight.shape() << " and "
               << bias.shape());
  QKV_CHECK(variant != LayerNormVariant::UnbiasedStd || C >= 2,
            op << " (seed003, unbiased std): the last dim of input " << x.shape()
               << " must be at least 2, the unbiased std of " << C << " value is undefined");
  return C;
}

// The RMS variant of the ops below, after their checks.
LayerNormOut rms_norm_forward(const Tensor& x_in, const Tensor& weight, float eps, int64_t C) {
  const Tensor x = x_in.contiguous(), w = weight.contiguous();
  const int64_t rows = x.numel() / C;
  LayerNormOut out{empty_like_device(x.shape(), x), Tensor(), empty_like_device(Dims{rows}, x), Tensor(),
                   LayerNormVariant::RMS};
  QKV_KERNEL(x, rms_norm_forward(out.y.f32(), out.rstd.f32(), x.f32(), w.f32(), rows, C, eps));
  return out;
}

Tensor add_rms_norm_forward(const Tensor& a_in, const Tensor& b_in, const Tensor& weight, float eps, int64_t C) {
  const Tensor a = a_in.contiguous(), b = b_in.contiguous(), w = weight.contiguous();
  Tensor y = empty_like_device(a.shape(), a);
  QKV_KERNEL(a, add_rms_norm_forward(y.f32(), a.f32(), b.f32(), w.f32(), a.numel() / C, C, eps));
  return y;
}

// dbias is left alone (RMSNorm has none); GradSlots' bias gradient is a scratch nobody reads.
void rms_norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& weight, const LayerNormOut& saved,
                       Tensor* dx, Tensor* dweight) {
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), w = weight.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / C;
  GradSlots g(dx, dweight, nullptr, x.shape(), weight.shape(), x.device());
  QKV_KERNEL(x, rms_norm_backward(g.dx->f32(), g.dw->f32(), dy.f32(), x.f32(), saved.rstd.f32(), w.f32(), rows, C,
                                  g.accumulate_dx));
}
}  // namespace

LayerNormOut layernorm_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias, float eps,
                               LayerNormVariant variant) {
  const int64_t C = checked_norm_dim(x_in, weight, bias, variant, "layernorm");
  const bool unbiased = variant == LayerNormVariant::UnbiasedStd;
  check_same_device("layernorm", {&x_in, &weight, &bias});
  if (variant == LayerNormVariant::RMS) return rms_norm_forward(x_in, weight, eps, C);
  const Tensor x = x_in.contiguous(), w = weight.contiguous(), b = bias.contiguous();
  const int64_t rows = x.numel() / C;
  LayerNormOut out{empty_like_device(x.shape(), x), empty_like_device(Dims{rows}, x), empty_like_device(Dims{rows}, x),
                   Tensor(), variant};
  if (unbiased) {
    out.stddev = empty_like_device(Dims{rows}, x);
    QKV_KERNEL(x, layernorm_unbiased_forward(out.y.f32(), out.mean.f32(), out.rstd.f32(), out.stddev.f32(), x.f32(),
                                             w.f32(), b.f32(), rows, C, eps));
  } else {
    QKV_KERNEL(x, layernorm_forward(out.y.f32(), out.mean.f32(), out.rstd.f32(), x.f32(), w.f32(), b.f32(), rows, C,
                                    eps));
  }
  return out;
}

Tensor add_layernorm_forward(const Tensor& a_in, const Tensor& b_in, const Tensor& weight, const Tensor& bias, float eps,
                             LayerNormVariant variant) {
  QKV_CHECK(a_in.shape() == b_in.shape(), "add + layernorm: operands " << a_in.shape() << " and " << b_in.shape()
                                                                       << " differ in shape");
  const int64_t C = checked_norm_dim(a_in, weight, bias, variant, "add + layernorm");
  const bool unbiased = variant == LayerNormVariant::UnbiasedStd;
  check_same_device("add + layernorm", {&a_in, &b_in, &weight, &bias});
  if (variant == LayerNormVariant::RMS) return add_rms_norm_forward(a_in, b_in, weight, eps, C);
  const Tensor a = a_in.contiguous(), b = b_in.contiguous(), w = weight.contiguous(), bi = bias.contiguous();
  Tensor y = empty_like_device(a.shape(), a);
  QKV_KERNEL(a, add_layernorm_forward(y.f32(), a.f32(), b.f32(), w.f32(), bi.f32(), a.numel() / C, C, eps, unbiased));
  return y;
}

void layernorm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& weight, const LayerNormOut& saved,
                        Tensor* dx, Tensor* dweight, Tensor* dbias) {
  QKV_CHECK(dy_in.shape() == x_in.shape(), "layernorm backward: grad " << dy_in.shape() << " vs input " << x_in.shape());
  check_same_device("layernorm backward", {&dy_in, &x_in, &weight});
  if (saved.variant == LayerNormVariant::RMS) return rms_norm_backward(dy_in, x_in, weight, saved, dx, dweight);
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), w = weight.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / C;
  GradSlots g(dx, dweight, dbias, x.shape(), weight.shape(), x.device());
  if (saved.variant == LayerNormVariant::UnbiasedStd)
    QKV_KERNEL(x, layernorm_unbiased_backward(g.dx->f32(), g.dw->f32(), g.db->f32(), dy.f32(), x.f32(),
                                              saved.mean.f32(), saved.rstd.f32(), saved.stddev.f32(), w.f32(), rows, C,
                                              g.accumulate_dx));
  else
    QKV_KERNEL(x, layernorm_backward(g.dx->f32(), g.dw->f32(), g.db->f32(), dy.f32(), x.f32(), saved.mean.f32(),
                                     saved.rstd.f32(), w.f32(), rows, C, g.accumulate_dx));
}

bool layernorm_can_use_output(const Tensor& weight, const Tensor& bias) {
  // On a GPU the input is saved: reading the weights would make the host wait for the device at
  // every layer norm of a training step. RMS (no bias) has no from-output backward.
  if (weight.device().is_cuda() || !bias.defined()) return false;
  const std::vector<float> w = weight.to_vector(), b = bias.to_vector();
  for (size_t i = 0; i < w.size(); ++i) {
    const float aw = std::fabs(w[i]);
    if (!(aw >= kLayerNormMinWeight) || !(std::fabs(b[i]) <= kLayerNormMaxBiasRatio * aw)) return false;
  }
  return true;
}

void layernorm_backward_from_output(const Tensor& dy_in, const Tensor& y, const Tensor& weight, const Tensor& bias,
                                    const LayerNormOut& saved, Tensor* dx, Tensor* dweight, Tensor* dbias) {
  QKV_CHECK(dy_in.shape() == y.shape() && y.is_contiguous(),
            "layernorm backward: grad " << dy_in.shape() << " vs output " << y.shape());
  QKV_CHECK(saved.variant != LayerNormVariant::RMS, "layernorm backward from the output: not implemented for RMS");
  check_same_device("layernorm backward", {&dy_in, &y, &weight, &bias});
  const Tensor dy = dy_in.contiguous(), w = weight.contiguous(), b = bias.contiguous();
  const int64_t C = y.size(-1), rows = y.numel() / C;
  GradSlots g(dx, dweight, dbias, y.shape(), weight.shape(), y.device());
  if (saved.variant == LayerNormVariant::UnbiasedStd)
    QKV_KERNEL(y, layernorm_unbiased_backward_from_output(g.dx->f32(), g.dw->f32(), g.db->f32(), dy.f32(), y.f32(),
                                                          saved.rstd.f32(), saved.stddev.f32(), w.f32(), b.f32(), rows,
                                                          C, g.accumulate_dx));
  else
    QKV_KERNEL(y, layernorm_backward_from_output(g.dx->f32(), g.dw->f32(), g.db->f32(), dy.f32(), y.f32(),
                                                 saved.rstd.f32(), w.f32(), b.f32(), rows, C, g.accumulate_dx));
}

Tensor softmax_forward(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  const int64_t C = x.size(-1);
  Tensor y = empty_like_device(x.shape(), x);
  QKV_KERNEL(x, softmax_forward(y.f32(), x.f32(), x.numel() / C, C));
  return y;
}

void softmax_backward(const Tensor& dy_in, const Tensor& y, Tensor* dx) {
  QKV_CHECK(dy_in.shape() == y.shape(), "softmax backward: grad " << dy_in.shape() << " vs output " << y.shape());
  check_same_device("softmax backward", {&dy_in, &y});
  const Tensor dy = dy_in.contiguous(), yc = y.contiguous();
  const int64_t C = y.size(-1);
  const bool acc = prepare_slot(dx, y.shape(), y.device());
  QKV_KERNEL(y, softmax_backward(dx->f32(), dy.f32(), yc.f32(), y.numel() / C, C, acc));
}

}  // namespace qkv::ops
