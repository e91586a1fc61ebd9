#include "qkv/autograd/functions.h"

namespace qkv::fn {
namespace {
// The gradient cell of an input, or null if it needs none: captured by backward nodes so they
// can accumulate without keeping the input's value alive.
using Cell = std::shared_ptr<GradCell>;
Tensor* slot(const Cell& c) { return c ? &c->grad : nullptr; }
}  // namespace

void accumulate_grad(const std::shared_ptr<GradCell>& cell, const Tensor& dy) {
  if (!cell->is_leaf && !cell->grad.defined() && dy.fills_its_buffer()) {
    cell->grad = dy;
    return;
  }
  ops::accumulate(dy, &cell->grad);
}

Var linear(const Var& x, const Var& w, const Var& b, InputUse use) {
  const ops::Precision precision = ops::product_precision();  // the backward multiplies as the forward did
  Tensor y = ops::linear_forward(x.value(), w.value(), b.defined() ? b.value() : Tensor(), precision);
  const bool rg = x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad());
  // Only dw reads x: without a weight gradient the node keeps x as it is (nothing is converted).
  const bool convert = use == InputUse::LastUse && rg && grad_enabled() && w.requires_grad();
  Tensor kept = convert ? ops::saved_for_backward(x.value(), precision) : x.value();
  return record_op(std::move(y), rg,
                   [xv = std::move(kept), wv = w.value(), xc = x.cell(), wc = w.cell(),
                    bc = b.defined() ? b.cell() : Cell(), precision](const Tensor& dy) {
                     ops::linear_backward(dy, xv, wv, slot(xc), slot(wc), slot(bc), precision);
                   });
}

Var matmul(const Var& a, const Var& b, bool transpose_b) {
  const ops::Precision precision = ops::product_precision();
  Tensor c = ops::matmul_forward(a.value(), b.value(), transpose_b, precision);
  return record_op(std::move(c), a.requires_grad() || b.requires_grad(),
                   [av = a.value(), bv = b.value(), ac = a.cell(), bc = b.cell(), transpose_b,
                    precision](const Tensor& dc) {
                     ops::matmul_backward(dc, av, bv, transpose_b, slot(ac), slot(bc), precision);
                   });
}

Var embedding(const Var& table, const Tensor& ids, int32_t padding_idx) {
  Tensor y = ops::embedding_forward(table.value(), ids);
  return record_op(std::move(y), table.requires_grad(),
                   [ids, tc = table.cell(), shape = table.shape(), padding_idx](const Tensor& dy) {
                     ops::embedding_backward(dy, ids, slot(tc), shape, padding_idx);
                   });
}

Var add(const Var& a, const Var& b) {
  Tensor y = ops::add_forward(a.value(), b.value());
  return record_op(std::move(y), a.requires_grad() || b.requires_grad(), [ac = a.cell(), bc = b.cell()](const Tensor& dy) {
    if (ac) accumulate_grad(ac, dy);
    if (bc) accumulate_grad(bc, dy);
  });
}

Var mul(const Var& a, const Var& b) {
  return record_op(ops::mul_forward(a.value(), b.value()), a.requires_grad() || b.requires_grad(),
                   [av = a.value(), bv = b.value(), ac = a.cell(), bc = b.cell()](const Tensor& dy) {
                     ops::mul_backward(dy, av, bv, slot(ac), slot(bc));
                   });
}

Var scale(const Var& x, float s) {
  return record_op(ops::scale_forward(x.value(), s), x.requires_grad(),
                   [xc = x.cell(), s](const Tensor& dy) { ops::scale_backward(dy, s, slot(xc)); });
}

Var relu(const Var& x) {
  // Backward keeps the output, not the input: y > 0 exactly where x > 0, and y is usually saved by
  // the next linear anyway, so the pre-activation (4x d_model wide in the FFN) can be freed.
  Tensor y = ops::relu_forward(x.value());
  return record_op(y, x.requires_grad(),
                   [y, xc = x.cell()](const Tensor& dy) { ops::relu_backward(dy, y, slot(xc)); });
}

Var tanh(const Var& x) {
  Tensor y = ops::tanh_forward(x.value());
  return record_op(y, x.requires_grad(), [y, xc = x.cell()](const Tensor& dy) { ops::tanh_backward(dy, y, slot(xc)); });
}

namespace {
// What an activation's backward keeps of its input: bf16 in bf16 precision (ops::saved_for_backward).
// The input is a linear layer's fresh output that only the activation reads.
Tensor kept_input(const Var& x) {
  if (!x.requires_grad() || !grad_enabled()) return x.value();
  return ops::saved_for_backward(x.value(), ops::product_precision());
}
}  // namespace

Var gelu(const Var& x) {
  return record_op(ops::gelu_forward(x.value()), x.requires_grad(),
                   [xv = kept_input(x), xc = x.cell()](const Tensor& dy) { ops::gelu_backward(dy, xv, slot(xc)); });
}

Var gelu_tanh(const Var& x) {
  return record_op(ops::gelu_tanh_forward(x.value()), x.requires_grad(),
                   [xv = kept_input(x), xc = x.cell()](const Tensor& dy) { ops::gelu_tanh_backward(dy, xv, slot(xc)); });
}

Var silu(const Var& x) {
  return record_op(ops::silu_forward(x.value()), x.requires_grad(),
                   [xv = kept_input(x), xc = x.cell()](const Tensor& dy) { ops::silu_backward(dy, xv, slot(xc)); });
}

Var dropout(const Var& x, float p, uint64_t seed, uint64_t offset) {
  if (p == 0.f) return x;  // identity: no copy, no node
  return record_op(ops::dropout_forward(x.value(), p, seed, offset), x.requires_grad(),
                   [xc = x.cell(), p, seed, offset](const Tensor& dy) {
                     ops::dropout_backward(dy, p, seed, offset, slot(xc));
                   });
}

Var layernorm(const Var& x, const Var& w, const Var& b, float eps, ops::LayerNormVariant variant) {
  ops::LayerNormOut out = ops::layernorm_forward(x.value(), w.value(), b.value(), eps, variant);
  const bool rg = x.requires_grad() || w.requires_grad() || b.requires_grad();
  if (rg && grad_enabled() && ops::layernorm_can_use_output(w.value(), b.value())) {
    // Save the output (which the next layer keeps anyway) rather than the input, which is then freed.
    Tensor y = std::move(out.y);
    out.mean = Tensor();  // this path needs rstd (and stddev), not mean
    return record_op(y, rg,
                     [y, wv = w.value(), bv = b.value(), saved = std::move(out), xc = x.cell(), wc = w.cell(),
                      bc = b.cell()](const Tensor& dy) {
                       ops::layernorm_backward_from_output(dy, y, wv, bv, saved, slot(xc), slot(wc), slot(bc));
                     });
  }
  Tensor y = out.y;
  out.y = Tensor();  // this path needs x, mean and rstd, not y
  return record_op(std::move(y), rg,
                   [xv = x.value(), wv = w.value(), saved = std::move(out), xc = x.cell(), wc = w.cell(),
                    bc = b.cell()](const Tensor& dy) {
                     ops::layernorm_backward(dy, xv, wv, saved, slot(xc), slot(wc), slot(bc));
                   });
}

Var add_layernorm(const Var& a, const Var& b, const Var& w, const Var& bias, float eps, ops::LayerNormVariant variant) {
  const bool rg = a.requires_grad() || b.requires_grad() || w.requires_grad() || bias.requires_grad();
  if (rg && grad_enabled()) return layernorm(add(a, b), w, bias, eps, variant);
  return Var(ops::add_layernorm_forward(a.value(), b.value(), w.value(), bias.value(), eps, variant));
}

Var softmax(const Var& x) {
  Tensor y = ops::softmax_forward(x.value());
  return record_op(y, x.requires_grad(),
                   [y, xc = x.cell()](const Tensor& dy) { ops::softmax_backward(dy, y, slot(xc)); });
}

namespace {
// What both attention ops record. In inference, forward(nullptr or &probs) computes the output (the
// softmax only when `weights` asks for it). In training, forward_saving(&saved, keep_weights) keeps
// what the backward needs (ops::AttentionSaved: the softmax, or on a GPU the flash kernels' row
// statistics unless `weights` asks for the softmax); backward(dout, saved, dq, dk, dv, dbias) gets
// the inputs' gradient slots (dbias: the position bias's, null without one or when it needs none).
template <class Forward, class ForwardSaving, class Backward>
Var record_attention(const Var& q, const Var& k, const Var& v, const Var& bias, Tensor* weights, Forward forward,
                     ForwardSaving forward_saving, Backward backward) {
  const bool rg = q.requires_grad() || k.requires_grad() || v.requires_grad() || bias.requires_grad();
  if (!rg || !grad_enabled()) {
    Tensor probs;
    Tensor out = forward(weights ? &probs : nullptr);
    if (weights) *weights = probs;
    return record_op(std::move(out), false, [](const Tensor&) {});
  }
  ops::AttentionSaved saved;
  Tensor out = forward_saving(&saved, weights != nullptr);
  if (weights) *weights = saved.probs;
  return record_op(std::move(out), rg,
                   [backward, saved, qc = q.cell(), kc = k.cell(), vc = v.cell(), bc = bias.cell()](
                       const Tensor& dout) { backward(dout, saved, slot(qc), slot(kc), slot(vc), slot(bc)); });
}

// masks with T5's position bias set from `bias`, when defined (callers leave masks.bias empty then).
ops::AttentionMasks with_bias(const ops::AttentionMasks& masks, const Var& bias) {
  if (!bias.defined()) return masks;
  QKV_CHECK(!masks.bias.defined(), "attention: a position bias given both in masks.bias and as position_bias");
  ops::AttentionMasks m = masks;
  m.bias = bias.value();
  return m;
}
}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks_in,
              const ops::AttentionDropoutSpec& dropout, Tensor* weights, const Var& position_bias) {
  const ops::AttentionMasks masks = with_bias(masks_in, position_bias);
  return record_attention(
      q, k, v, position_bias, weights,
      [&](Tensor* probs) {
        return ops::attention_forward(q.value(), k.value(), v.value(), masks, dropout, probs, true);
      },
      [&](ops::AttentionSaved* saved, bool keep_weights) {
        return ops::attention_forward_saving(q.value(), k.value(), v.value(), masks, dropout, saved, keep_weights);
      },
      [qv = q.value(), kv = k.value(), vv = v.value(), masks, dropout](
          const Tensor& dout, const ops::AttentionSaved& saved, Tensor* dq, Tensor* dk, Tensor* dv, Tensor* dbias) {
        ops::attention_backward(dout, qv, kv, vv, saved, masks, dropout, dq, dk, dv, dbias);
      });
}

Var multi_head_attention(const Var& q, const Var& k, const Var& v, int64_t num_heads,
                         const ops::AttentionMasks& masks_in, const ops::AttentionDropoutSpec& dropout, Tensor* weights,
                         const Var& position_bias) {
  const ops::AttentionMasks masks = with_bias(masks_in, position_bias);
  return record_attention(
      q, k, v, position_bias, weights,
      [&](Tensor* probs) {
        return ops::multi_head_attention_forward(q.value(), k.value(), v.value(), num_heads, masks, dropout, probs,
                                                 true);
      },
      [&](ops::AttentionSaved* saved, bool keep_weights) {
        return ops::multi_head_attention_forward_saving(q.value(), k.value(), v.value(), num_heads, masks, dropout,
                                                        saved, keep_weights);
      },
      [qv = q.value(), kv = k.value(), vv = v.value(), num_heads, masks, dropout](
          const Tensor& dout, const ops::AttentionSaved& saved, Tensor* dq, Tensor* dk, Tensor* dv, Tensor* dbias) {
        ops::multi_head_attention_backward(dout, qv, kv, vv, num_heads, saved, masks, dropout, dq, dk, dv, dbias);
      });
}

Var masked_fill(const Var& scores, const ops::AttentionMasks& masks) {
  return record_op(ops::masked_fill_forward(scores.value(), masks), scores.requires_grad(),
                   [masks, sc = scores.cell()](const Tensor& dy) { ops::masked_fill_backward(dy, masks, slot(sc)); });
}

Var split_heads(const Var& x, int64_t num_heads) {
  // The forward is a view; its gradient (B, H, T, dk) is laid back out as (B, T, D).
  return record_op(ops::split_heads(x.value(), num_heads), x.requires_grad(),
                   [xc = x.cell()](const Tensor& dy) { accumulate_grad(xc, ops::combine_heads(dy)); });
}

Var combine_heads(const Var& x) {
  const int64_t heads = x.size(1);
  return record_op(ops::combine_heads(x.value()), x.requires_grad(), [xc = x.cell(), heads](const Tensor& dy) {
    accumulate_grad(xc, ops::split_heads(dy, heads).contiguous());
  });
}

Var add_positional(const Var& x, const Tensor& table) {
  return record_op(ops::add_positional_forward(x.value(), table), x.requires_grad(),
                   [xc = x.cell()](const Tensor& dy) { accumulate_grad(xc, dy); });
}

Var reshape(const Var& x, const Dims& shape) {
  const Tensor y = x.value().contiguous().reshape(shape);
  return record_op(y, x.requires_grad(), [xc = x.cell(), in_shape = x.shape()](const Tensor& dy) {
    accumulate_grad(xc, dy.contiguous().reshape(in_shape));
  });
}

Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index, float label_smoothing,
                  Tensor* row_loss) {
  ops::CrossEntropyOut out = ops::cross_entropy_forward(logits.value(), targets, ignore_index, label_smoothing);
  if (row_loss) *row_loss = out.row_loss;
  Tensor loss = out.loss;
  out.row_loss = Tensor();
  return record_op(std::move(loss), logits.requires_grad(),
                   [lv = logits.value(), targets, saved = std::move(out), lc = logits.cell(), ignore_index,
                    label_smoothing](const Tensor& dloss) mutable {
                     // When this node holds the only reference to the logits (the usual case in
                     // training), their buffer becomes the gradient: one (N, V) buffer fewer at the peak.
                     if (!lc->grad.defined() && lv.is_contiguous() && lv.is_unique()) {
                       lc->grad = ops::cross_entropy_backward_inplace(dloss.item(), std::move(lv), targets, saved,
                                                                      ignore_index, label_smoothing);
                       return;
                     }
                     ops::cross_entropy_backward(dloss.item(), lv, targets, saved, ignore_index, label_smoothing,
                                                 slot(lc));
                   });
}

}  // namespace qkv::fn
