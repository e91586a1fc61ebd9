#include "qkv/kernels/attention.h"
#include "qkv/kernels/cuda/flash_attention.h"

#include <omp.h>

#include <sstream>
#include <string>

#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"

namespace qkv::ops {
namespace {

kernels::HeadsView heads_view(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2]}; }

// Makes the last dim unit-stride (the kernels' one layout requirement); other strides are kept.
Tensor unit_last(const Tensor& t) { return t.strides()[t.dim() - 1] == 1 ? t : t.contiguous(); }

// Masks are i32, (B, Tk) for keys and (B, Tq) for queries; `op` and `context` complete the error.
void check_masks(const char* op, int64_t B, int64_t Tq, int64_t Tk, const AttentionMasks& m,
                 const std::string& context = "") {
  if (m.key_keep.defined())
    QKV_CHECK(m.key_keep.dtype() == DType::I32 && m.key_keep.shape() == (Dims{B, Tk}),
              op << ": key mask " << m.key_keep.describe() << " must be i32 (B, Tk) = (" << B << ", " << Tk << ")"
                 << context);
  if (m.query_keep.defined())
    QKV_CHECK(m.query_keep.dtype() == DType::I32 && m.query_keep.shape() == (Dims{B, Tq}),
              op << ": query mask " << m.query_keep.describe() << " must be i32 (B, Tq) = (" << B << ", " << Tq << ")"
                 << context);
}

void check_masks(const kernels::AttentionDims& d, const AttentionMasks& m) {
  check_masks("attention", d.B, d.Tq, d.Tk, m);
  if (m.bias.defined())
    QKV_CHECK(m.bias.dtype() == DType::F32 && m.bias.is_contiguous() && m.bias.shape() == (Dims{d.Tq, d.Tk, d.H}),
              "attention: position bias " << m.bias.describe() << " must be f32, contiguous, (Tq, Tk, H) = (" << d.Tq
                                          << ", " << d.Tk << ", " << d.H << ")");
}

kernels::AttentionDims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& m) {
  QKV_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
            "attention: q, k, v must be (B, H, T, dk); got q " << q.shape() << ", k " << k.shape() << ", v "
                                                            << v.shape());
  QKV_CHECK(k.shape() == v.shape(), "attention: k " << k.shape() << " and v " << v.shape() << " differ");
  QKV_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
            "attention: q " << q.shape() << " and k " << k.shape() << " disagree in B, H or dk");
  const kernels::AttentionDims d{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)};
  check_masks(d, m);
  return d;
}


kernels::AttentionMask kernel_mask(const AttentionMasks& m, Tensor* key_c, Tensor* query_c) {
  kernels::AttentionMask km;
  if (m.key_keep.defined()) {
    *key_c = m.key_keep.contiguous();
    km.key_keep = key_c->i32();
  }
  if (m.query_keep.defined()) {
    *query_c = m.query_keep.contiguous();
    km.query_keep = query_c->i32();
  }
  km.causal = m.causal;
  km.fill = m.fill;
  km.bias = m.bias.defined() ? m.bias.f32() : nullptr;  // checked contiguous (check_masks)
  km.scale_scores = m.scale_scores;
  return km;
}

kernels::AttentionDropout kernel_dropout(const AttentionDropoutSpec& s) {
  QKV_CHECK(s.p >= 0.f && s.p < 1.f, "attention: dropout probability " << s.p << " outside [0, 1)");
  return {s.p, s.seed, s.offset};
}

}  // namespace

namespace {
// Inference heads of at least this many queries take the GPU's flash kernels (encoders, prompts);
// decoding steps keep the row-per-block kernel, whose warps share a query's keys.
constexpr int64_t kFlashInferenceQueries = 16;

// Whether the GPU's flash kernels (kernels/cuda/flash_attention.h) take attention of these sizes on q's device.
bool flash_takes(const Tensor& q, const kernels::AttentionDims& d) {
  if constexpr (cuda::kBuilt) return q.device().is_cuda() && kernels::cuda::flash_attention_fits(d);
  return false;
}

// Whether the flash kernels on q's GPU run on the tensor cores in bf16: in bf16 precision (ops/precision.h),
// as autocast's SDPA does, where the GPU has them (the CPU's heads: kernels/attention_products.h).
// Called only under `if constexpr (cuda::kBuilt)`: unused in a build without CUDA.
[[maybe_unused]] bool flash_in_bf16(const Tensor& q) {
  if constexpr (cuda::kBuilt)
    return product_precision() == Precision::BF16 && on_cuda(q) && kernels::cuda::flash_bf16_supported();
  return false;
}

// Every forward after its checks: unit-stride views, the kernel's masks, the outputs. `out` is the
// (B, H, Tq, dk) tensor written: the result itself, or the heads of a (B, Tq, D) result. Dropout's
// scratch has a slot per OpenMP thread. stats, given (a GPU training forward that keeps no softmax),
// gets the flash kernels' row statistics instead of probs; *ran_bf16, unless null, whether the flash
// kernels ran in bf16.
void forward_into(const kernels::AttentionDims& d, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                  const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* probs, bool inference,
                  Tensor out, const kernels::KeyRows& key_rows = {}, Tensor* stats = nullptr,
                  bool* ran_bf16 = nullptr) {
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  Tensor key_c, query_c;
  const kernels::AttentionMask km = kernel_mask(masks, &key_c, &query_c);
  QKV_CHECK(probs || stats || inference, "attention: training needs the softmax (probs) for its backward");
  check_same_device("attention", {&q, &k, &v, &out, &key_c, &query_c, &masks.bias});
  if (probs) *probs = empty_like_device(Dims{d.B, d.H, d.Tq, d.Tk}, q);
  if (on_cuda(q)) {
    if constexpr (cuda::kBuilt) {
      const bool flash = !probs && !key_rows.rows && flash_takes(q, d) && (stats || d.Tq >= kFlashInferenceQueries);
      QKV_CHECK(flash || !stats, "attention: the flash kernels do not take dk = " << d.dk);
      if (flash) {
        if (stats) *stats = empty_like_device(Dims{d.B, d.H, d.Tq, 2}, q);
        const bool bf16 = flash_in_bf16(q);
        if (ran_bf16) *ran_bf16 = bf16;
        const auto forward = bf16 ? kernels::cuda::flash_attention_forward_bf16 : kernels::cuda::flash_attention_forward;
        forward(d, q.f32(), heads_view(q), k.f32(), heads_view(k), v.f32(), heads_view(v), out.f32(), heads_view(out),
                stats ? stats->f32() : nullptr, km, kernel_dropout(dropout));
      } else {
        kernels::cuda::attention_forward(d, q.f32(), heads_view(q), k.f32(), heads_view(k), v.f32(), heads_view(v),
                                         out.f32(), heads_view(out), probs ? probs->f32() : nullptr, km,
                                         kernel_dropout(dropout), key_rows);
      }
    }
    return;
  }
  QKV_CHECK(!stats, "attention: row statistics are kept on a GPU only");
  const int slots = omp_get_max_threads();
  Tensor scratch = dropout.p > 0.f ? Tensor::empty(Dims{slots * d.Tq * d.Tk}) : Tensor();
  kernels::attention_forward(d, q.f32(), heads_view(q), k.f32(), heads_view(k), v.f32(), heads_view(v), out.f32(),
                             heads_view(out), probs ? probs->f32() : nullptr, km, kernel_dropout(dropout),
                             scratch.defined() ? scratch.f32() : nullptr, slots, inference, key_rows);
}

// A training forward into `out` (the result, or its heads view `out_heads`): the softmax kept, or the
// flash kernels' statistics and the output.
void forward_saving_into(const kernels::AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionMasks& masks, const AttentionDropoutSpec& dropout, AttentionSaved* saved,
                         bool keep_weights, const Tensor& out_heads) {
  QKV_CHECK(saved, "attention: a training forward needs somewhere to keep what its backward reads");
  *saved = AttentionSaved{};
  if (!keep_weights && flash_takes(q, d)) {
    forward_into(d, q, k, v, masks, dropout, nullptr, false, out_heads, {}, &saved->stats, &saved->bf16);
    saved->out = out_heads;
  } else {
    // bf16 precision on the CPU multiplies in bf16 (Q K^T, P V, and so the backward's products:
    // kernels/attention_products.h), as autocast's SDPA and the GPU's bf16 flash kernels do.
    kernels::AttentionDims dims = d;
    dims.bf16_products = saved->bf16 = !on_cuda(q) && product_precision() == Precision::BF16;
    forward_into(dims, q, k, v, masks, dropout, &saved->probs, false, out_heads);
    // It keeps the softmax rounded to bf16, half the memory of what the backward reads; its dV
    // product rounds P to bf16 anyway (the softmax backward reads it rounded too). A softmax the
    // caller asked for stays float32.
    if (!keep_weights && saved->bf16) saved->probs = saved->probs.to(DType::BF16);
  }
}

Tensor forward_checked(const kernels::AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* probs, bool inference,
                       const kernels::KeyRows& key_rows = {}) {
  Tensor out = empty_like_device(Dims{d.B, d.H, d.Tq, d.dk}, q);
  forward_into(d, q, k, v, masks, dropout, probs, inference, out, key_rows);
  return out;
}

// The (B, H, T, dk) heads of `name`, a (B, T, H * dk) projection (a view when x is contiguous).
Tensor heads_of(const Tensor& x, int64_t num_heads, const char* name) {
  QKV_CHECK(x.dim() == 3, "multi-head attention: " << name << " must be (B, T, D), got " << x.shape());
  return split_heads(x, num_heads);
}
}  // namespace

Tensor attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionMasks& masks,
                         const AttentionDropoutSpec& dropout, Tensor* probs, bool inference) {
  const kernels::AttentionDims d = check_attention(q_in, k_in, v_in, masks);
  return forward_checked(d, q_in, k_in, v_in, masks, dropout, probs, inference);
}

Tensor attention_forward_saving(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks,
                                const AttentionDropoutSpec& dropout, AttentionSaved* saved, bool keep_weights) {
  const kernels::AttentionDims d = check_attention(q, k, v, masks);
  Tensor out = empty_like_device(Dims{d.B, d.H, d.Tq, d.dk}, q);
  forward_saving_into(d, q, k, v, masks, dropout, saved, keep_weights, out);
  return out;
}

Tensor attention_forward_mapped(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& key_rows,
                                const AttentionMasks& masks, Tensor* probs) {
  QKV_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && k_in.shape() == v_in.shape() && q_in.size(1) == k_in.size(1) &&
                q_in.size(3) == k_in.size(3),
            "mapped attention: q " << q_in.shape() << ", k " << k_in.shape() << ", v " << v_in.shape()
                                   << " must be (B, H, Tq, dk), (Bk, H, Tk, dk) twice");
  const int64_t Bk = k_in.size(0);
  const kernels::AttentionDims d{q_in.size(0), q_in.size(1), q_in.size(2), k_in.size(2), q_in.size(3)};
  QKV_CHECK(d.Tq <= 8, "mapped attention: " << d.Tq << " queries per head; at most 8 (decoding steps)");
  QKV_CHECK(key_rows.dtype() == DType::I32 && key_rows.shape() == (Dims{d.B, d.Tk}) && key_rows.strides()[1] == 1,
            "mapped attention: key rows " << key_rows.describe() << " must be i32 (B, Tk) = (" << d.B << ", " << d.Tk
                                          << ") with a contiguous last dim");
  // The kernel reads the map where q lives: a host map with GPU heads would hand it a host pointer.
  check_same_device("mapped attention", {&q_in, &k_in, &v_in, &key_rows});
  const int64_t stride = key_rows.strides()[0];
  const Tensor host_rows = key_rows.device().is_cuda() ? key_rows.to(Device::cpu()) : key_rows;  // checked here
  const int64_t host_stride = host_rows.strides()[0];
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t j = 0; j < d.Tk; ++j) {
      const int32_t row = host_rows.i32()[b * host_stride + j];
      QKV_CHECK(row >= 0 && row < Bk, "mapped attention: key " << j << " of row " << b << " is in row " << row
                                                               << ", outside [0, " << Bk << ")");
    }
  const int32_t* rows = key_rows.i32();
  check_masks(d, masks);  // the masks cover q's rows
  return forward_checked(d, q_in, k_in, v_in, masks, {}, probs, true, {rows, stride});
}

namespace {
// q, k and v may be one Var (self-attention on x directly): their slots then alias, and the
// kernel's three outputs must be computed apart and added into the shared slot afterwards.
// run(dq, dk, dv) is the backward on distinct slots. Returns false (and runs nothing) when the slots
// are distinct.
template <class Backward>
bool backward_through_aliased_slots(Tensor* dq, Tensor* dk, Tensor* dv, Backward run) {
  if (!((dq && (dq == dk || dq == dv)) || (dk && dk == dv))) return false;
  Tensor gq, gk, gv;
  run(dq ? &gq : nullptr, dk ? &gk : nullptr, dv ? &gv : nullptr);
  if (dq) accumulate(gq, dq);
  if (dk) accumulate(gk, dk);
  if (dv) accumulate(gv, dv);
  return true;
}

// Where the kernels write each head's gradient of the position bias (B, H, Tq, Tk), on q's device:
// undefined when nobody asked for it (dbias null).
Tensor bias_grad_rows(const kernels::AttentionDims& d, const Tensor& q, const Tensor* dbias) {
  return dbias ? empty_like_device(Dims{d.B, d.H, d.Tq, d.Tk}, q) : Tensor();
}

// dbias (Tq, Tk, H) gets the per-head gradients `rows` summed over the batch, under the slot
// convention (written when undefined, added to otherwise).
void sum_bias_grad(const kernels::AttentionDims& d, const Tensor& rows, Tensor* dbias) {
  if (!dbias) return;
  Tensor g = empty_like_device(Dims{d.Tq, d.Tk, d.H}, rows);
  QKV_KERNEL(rows, attention_bias_grad(d, rows.f32(), g.f32()));
  if (dbias->defined())
    accumulate(g, dbias);
  else
    *dbias = std::move(g);
}

// The CPU's backward into the heads hq, hk, hv (added to when accumulate is set). dbias, unless
// null, receives the position bias's gradient (Tq, Tk, H) under the slot convention.
void backward_on_cpu(const kernels::AttentionDims& d, const Tensor& dout, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& probs, const kernels::AttentionMask& km,
                     const AttentionDropoutSpec& dropout, Tensor& hq, Tensor& hk, Tensor& hv, bool accumulate_into,
                     Tensor* dbias) {
  QKV_CHECK(probs.defined(), "attention backward: the CPU's backward reads the softmax");
  const kernels::SavedProbs saved = probs.dtype() == DType::BF16
                                        ? kernels::SavedProbs(reinterpret_cast<const uint16_t*>(probs.data<bfloat16>()))
                                        : kernels::SavedProbs(probs.f32());
  const int slots = omp_get_max_threads();
  Tensor scratch = Tensor::empty(Dims{slots * kernels::attention_backward_scratch(d, saved)});
  Tensor ds = bias_grad_rows(d, q, dbias);
  kernels::attention_backward(d, dout.f32(), heads_view(dout), q.f32(), heads_view(q), k.f32(), heads_view(k),
                              v.f32(), heads_view(v), saved, km, kernel_dropout(dropout), hq.f32(),
                              heads_view(hq), hk.f32(), heads_view(hk), hv.f32(), heads_view(hv), accumulate_into,
                              scratch.f32(), slots, dbias ? ds.f32() : nullptr);
  sum_bias_grad(d, ds, dbias);
}

// The backward on distinct slots shaped like the op's inputs (q_shape, kv_shape); the kernel
// writes through heads(slot), their (B, H, T, dk) view. Its inputs are (B, H, T, dk) views.
template <class Heads>
void backward_into(const kernels::AttentionDims& d, const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                   const Tensor& v_in, const Dims& q_shape, const Dims& kv_shape, const AttentionSaved& saved,
                   const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk,
                   Tensor* dv, Tensor* dbias, Heads heads) {
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in), dout = unit_last(dout_in);
  Tensor key_c, query_c;
  const kernels::AttentionMask km = kernel_mask(masks, &key_c, &query_c);
  // One accumulate flag serves all three outputs: if any slot already holds a gradient, the fresh
  // ones are zeroed and everything is added into.
  Tensor sq, sk, sv;
  Tensor* slot_q = dq ? dq : &sq;
  Tensor* slot_k = dk ? dk : &sk;
  Tensor* slot_v = dv ? dv : &sv;
  const Tensor& probs = saved.probs;
  check_same_device("attention backward",
                    {&dout, &q, &k, &v, &probs, &saved.stats, &saved.out, &key_c, &query_c, &masks.bias});
  QKV_CHECK(probs.defined() || (saved.stats.defined() && saved.out.defined()),
            "attention backward: the forward kept neither the softmax nor its statistics");
  const Device device = q.device();
  const bool any_defined = slot_q->defined() || slot_k->defined() || slot_v->defined();
  if (any_defined) {
    prepare_zeroed_slot(slot_q, q_shape, device);
    prepare_zeroed_slot(slot_k, kv_shape, device);
    prepare_zeroed_slot(slot_v, kv_shape, device);
  } else {
    prepare_slot(slot_q, q_shape, device);
    prepare_slot(slot_k, kv_shape, device);
    prepare_slot(slot_v, kv_shape, device);
  }
  Tensor hq = heads(*slot_q), hk = heads(*slot_k), hv = heads(*slot_v);
  if (on_cuda(q)) {
    if constexpr (cuda::kBuilt) {
      Tensor ds = bias_grad_rows(d, q, dbias);
      float* ds_rows = dbias ? ds.f32() : nullptr;
      if (probs.defined()) {
        kernels::cuda::attention_backward(d, dout.f32(), heads_view(dout), q.f32(), heads_view(q), k.f32(),
                                          heads_view(k), v.f32(), heads_view(v), probs.f32(), km,
                                          kernel_dropout(dropout), hq.f32(), heads_view(hq), hk.f32(),
                                          heads_view(hk), hv.f32(), heads_view(hv), any_defined, ds_rows);
      } else {
        const Tensor out = unit_last(saved.out);
        const auto backward =
            saved.bf16 ? kernels::cuda::flash_attention_backward_bf16 : kernels::cuda::flash_attention_backward;
        backward(d, dout.f32(), heads_view(dout), q.f32(), heads_view(q), k.f32(), heads_view(k), v.f32(),
                 heads_view(v), out.f32(), heads_view(out), saved.stats.f32(), km, kernel_dropout(dropout), hq.f32(),
                 heads_view(hq), hk.f32(), heads_view(hk), hv.f32(), heads_view(hv), any_defined, ds_rows);
      }
      sum_bias_grad(d, ds, dbias);
    }
    return;
  }
  kernels::AttentionDims dims = d;
  dims.bf16_products = saved.bf16;  // the forward's products' precision
  backward_on_cpu(dims, dout, q, k, v, probs, km, dropout, hq, hk, hv, any_defined, dbias);
}
}  // namespace

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk,
                        Tensor* dv, Tensor* dbias) {
  attention_backward(dout, q, k, v, AttentionSaved{probs, {}, {}}, masks, dropout, dq, dk, dv, dbias);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionSaved& saved, const AttentionMasks& masks, const AttentionDropoutSpec& dropout,
                        Tensor* dq, Tensor* dk, Tensor* dv, Tensor* dbias) {
  const kernels::AttentionDims d = check_attention(q, k, v, masks);
  QKV_CHECK(dout.shape() == q.shape(), "attention backward: grad " << dout.shape() << " vs q " << q.shape());
  if (backward_through_aliased_slots(dq, dk, dv, [&](Tensor* gq, Tensor* gk, Tensor* gv) {
        attention_backward(dout, q, k, v, saved, masks, dropout, gq, gk, gv, dbias);
      }))
    return;
  backward_into(d, dout, q, k, v, q.shape(), k.shape(), saved, masks, dropout, dq, dk, dv, dbias,
                [](const Tensor& slot) { return slot; });
}

namespace {
// A multi-head forward: q, k, v read as heads, the (B, Tq, D) result allocated and handed to
// into(d, qh, kh, vh, heads of the result), which writes it.
template <class Into>
Tensor multi_head_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                          const AttentionMasks& masks, Into into) {
  const Tensor qh = heads_of(q, num_heads, "q"), kh = heads_of(k, num_heads, "k"), vh = heads_of(v, num_heads, "v");
  const kernels::AttentionDims d = check_attention(qh, kh, vh, masks);
  Tensor out = empty_like_device(q.shape(), q);
  into(d, qh, kh, vh, split_heads(out, num_heads));
  return out;
}
}  // namespace

Tensor multi_head_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                                    const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* probs,
                                    bool inference) {
  return multi_head_forward(q, k, v, num_heads, masks, [&](const auto& d, const Tensor& qh, const Tensor& kh,
                                                           const Tensor& vh, const Tensor& out) {
    forward_into(d, qh, kh, vh, masks, dropout, probs, inference, out);
  });
}

void multi_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t num_heads, const Tensor& probs, const AttentionMasks& masks,
                                   const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk, Tensor* dv,
                                   Tensor* dbias) {
  multi_head_attention_backward(dout, q, k, v, num_heads, AttentionSaved{probs, {}, {}}, masks, dropout, dq, dk, dv,
                                dbias);
}

Tensor multi_head_attention_forward_saving(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                                           const AttentionMasks& masks, const AttentionDropoutSpec& dropout,
                                           AttentionSaved* saved, bool keep_weights) {
  return multi_head_forward(q, k, v, num_heads, masks, [&](const auto& d, const Tensor& qh, const Tensor& kh,
                                                           const Tensor& vh, const Tensor& out) {
    forward_saving_into(d, qh, kh, vh, masks, dropout, saved, keep_weights, out);
  });
}

void multi_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t num_heads, const AttentionSaved& saved, const AttentionMasks& masks,
                                   const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk, Tensor* dv,
                                   Tensor* dbias) {
  const Tensor qh = heads_of(q, num_heads, "q"), kh = heads_of(k, num_heads, "k"), vh = heads_of(v, num_heads, "v");
  const kernels::AttentionDims d = check_attention(qh, kh, vh, masks);
  QKV_CHECK(dout.shape() == q.shape(),
            "multi-head attention backward: grad " << dout.shape() << " vs q " << q.shape());
  if (backward_through_aliased_slots(dq, dk, dv, [&](Tensor* gq, Tensor* gk, Tensor* gv) {
        multi_head_attention_backward(dout, q, k, v, num_heads, saved, masks, dropout, gq, gk, gv, dbias);
      }))
    return;
  backward_into(d, heads_of(dout, num_heads, "its gradient"), qh, kh, vh, q.shape(), k.shape(), saved, masks,
                dropout, dq, dk, dv, dbias, [num_heads](const Tensor& slot) { return split_heads(slot, num_heads); });
}

Tensor keep_mask(const Tensor& ids_in, int32_t pad_id) {
  const Tensor ids = ids_in.contiguous();
  Tensor keep = empty_like_device(ids.shape(), ids, DType::I32);
  if (on_cuda(ids)) {
    if constexpr (cuda::kBuilt) kernels::cuda::keep_mask(keep.i32(), ids.i32(), ids.numel(), pad_id);
    return keep;
  }
  const int32_t* s = ids.i32();
  int32_t* k = keep.i32();
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) k[i] = s[i] != pad_id ? 1 : 0;
  return keep;
}

namespace {
// Calls f(offset) for every masked score of a contiguous (B, H, Tq, Tk) tensor.
template <class F>
void for_each_masked(const Dims& s, const AttentionMasks& m, F&& f) {
  const Tensor key = m.key_keep.defined() ? m.key_keep.contiguous() : Tensor();
  const Tensor query = m.query_keep.defined() ? m.query_keep.contiguous() : Tensor();
  const int64_t B = s[0], H = s[1], Tq = s[2], Tk = s[3];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) {
          const bool masked = (key.defined() && key.i32()[b * Tk + j] == 0) ||
                              (query.defined() && query.i32()[b * Tq + i] == 0) || (m.causal && j > i + (Tk - Tq));
          if (masked) f(((b * H + h) * Tq + i) * Tk + j);
        }
}
}  // namespace

namespace {
void check_masks_for_scores(const Tensor& scores, const AttentionMasks& m) {
  QKV_CHECK(scores.dim() == 4, "masked_fill: scores must be (B, H, Tq, Tk), got " << scores.shape());
  std::ostringstream context;
  context << " for scores " << scores.shape();
  check_masks("masked_fill", scores.size(0), scores.size(2), scores.size(3), m, context.str());
}

// The unfused masked fill exists to test the fused attention; on a GPU it runs on the host.
AttentionMasks masks_on(const AttentionMasks& m, Device device) {
  AttentionMasks out = m;
  if (m.key_keep.defined()) out.key_keep = m.key_keep.to(device);
  if (m.query_keep.defined()) out.query_keep = m.query_keep.to(device);
  return out;
}
}  // namespace

Tensor masked_fill_forward(const Tensor& scores, const AttentionMasks& masks) {
  if (scores.device().is_cuda())
    return masked_fill_forward(scores.to(Device::cpu()), masks_on(masks, Device::cpu())).to(scores.device());
  check_masks_for_scores(scores, masks);
  Tensor y = scores.clone();
  float* p = y.f32();
  for_each_masked(y.shape(), masks, [&](int64_t off) { p[off] = masks.fill; });
  return y;
}

void masked_fill_backward(const Tensor& dy, const AttentionMasks& masks, Tensor* dscores) {
  if (dy.device().is_cuda()) {
    Tensor g;
    masked_fill_backward(dy.to(Device::cpu()), masks_on(masks, Device::cpu()), &g);
    accumulate(g.to(dy.device()), dscores);
    return;
  }
  check_masks_for_scores(dy, masks);
  Tensor g = dy.clone();
  float* p = g.f32();
  for_each_masked(g.shape(), masks, [&](int64_t off) { p[off] = 0.f; });
  accumulate(g, dscores);
}

}  // namespace qkv::ops
