// Differentiable ops on Vars: each runs the op's forward and records its hand-written backward
// (see qkv/ops/ops.h for shapes and derivations). These are what nn modules compose.
#pragma once
#include <cstdint>

#include "qkv/autograd/graph.h"
#include "qkv/ops/ops.h"

namespace qkv::fn {

// Adds dy into cell's gradient. The first gradient of an intermediate takes dy's buffer instead of a
// copy (a residual add hands its output gradient to both inputs: two copies of (B, T, D) per
// sub-layer before, 2-3% of a training step). Nothing writes into a gradient in place except
// through ops::prepare_slot, which first gives a shared slot a buffer of its own. Leaves
// (parameters, inputs under test) always get their own: optimizers, clipping and zero_grad write
// into theirs in place.
void accumulate_grad(const std::shared_ptr<GradCell>& cell, const Tensor& dy);

// Whether a linear layer's caller keeps using its input. LastUse: nothing else keeps x (a dropout's
// or an activation's fresh output), so backward may keep it in the form its product reads
// (ops::saved_for_backward: bf16 in bf16 precision, half the memory, the same gradient).
// Shared (the default): x is kept as it is, since another node or the caller holds it anyway (a
// LayerNorm output that its own backward reads, the input of three projections).
enum class InputUse { Shared, LastUse };

Var linear(const Var& x, const Var& weight, const Var& bias,  // bias may be an undefined Var
           InputUse use = InputUse::Shared);
Var matmul(const Var& a, const Var& b, bool transpose_b = false);
Var embedding(const Var& table, const Tensor& ids, int32_t padding_idx = -1);  // padding_idx: no gradient
Var add(const Var& a, const Var& b);
Var scale(const Var& x, float s);
Var mul(const Var& a, const Var& b);  // elementwise a * b, same shapes
Var relu(const Var& x);
Var gelu(const Var& x);
Var tanh(const Var& x);
Var gelu_tanh(const Var& x);  // F.gelu(x, approximate='tanh')
Var silu(const Var& x);       // F.silu(x): x sigmoid(x)
Var dropout(const Var& x, float p, uint64_t seed, uint64_t offset);
// bias is an undefined Var for ops::LayerNormVariant::RMS (gradients then reach x and weight only).
Var layernorm(const Var& x, const Var& weight, const Var& bias, float eps,
              ops::LayerNormVariant variant = ops::LayerNormVariant::Standard);
// layernorm(add(a, b)): recorded as those two ops when a gradient is being taken, else one fused op
// (ops::add_layernorm_forward, the same bits) that skips a pass over memory.
Var add_layernorm(const Var& a, const Var& b, const Var& weight, const Var& bias, float eps,
                  ops::LayerNormVariant variant = ops::LayerNormVariant::Standard);
Var softmax(const Var& x);
// weights, when given, receives the softmax (B, H, Tq, Tk) that the op computes anyway (for pictures).
// position_bias, when defined: T5's bias (Tq, Tk, H), set as masks.bias (leave that empty), its
// gradient accumulated when it requires one (T5 also sets masks.scale_scores = false).
Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks,
              const ops::AttentionDropoutSpec& dropout = {}, Tensor* weights = nullptr,
              const Var& position_bias = Var());
// The same on (B, T, D) projections read as num_heads heads, returning (B, Tq, D): what
// combine_heads(attention(split_heads(q), split_heads(k), split_heads(v))) computes, without copies.
Var multi_head_attention(const Var& q, const Var& k, const Var& v, int64_t num_heads,
                         const ops::AttentionMasks& masks, const ops::AttentionDropoutSpec& dropout = {},
                         Tensor* weights = nullptr, const Var& position_bias = Var());
Var masked_fill(const Var& scores, const ops::AttentionMasks& masks);
Var split_heads(const Var& x, int64_t num_heads);
Var combine_heads(const Var& x);
Var add_positional(const Var& x, const Tensor& table);
Var reshape(const Var& x, const Dims& shape);
// Mean cross-entropy (scalar (1)). If row_loss is given it receives the per-row losses (N).
Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index, float label_smoothing = 0.f,
                  Tensor* row_loss = nullptr);

}  // namespace qkv::fn
