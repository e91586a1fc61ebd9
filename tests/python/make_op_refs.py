#!/usr/bin/env python3
"""Reference data for tests/ops/op_reference_test.cpp: every op of qkv::fn, computed by PyTorch.

For each case this draws float32 inputs from a fixed torch.manual_seed, computes the output with
the same PyTorch calls the seed model uses (nn.Linear, nn.Embedding, +, *, relu, exact-erf GELU,
tanh GELU, nn.LayerNorm(eps=1e-5), seed 003's LayerNorm, T5's RMSNorm, softmax(-1), masked_fill(-1e9) attention
(and T5's: unscaled, with a position bias), view/transpose head split,
sinusoidal positional encoding, nn.CrossEntropyLoss(ignore_index=0, label_smoothing=eps)), runs
backward with a random upstream gradient `g` (g = 1 for the scalar loss) and writes one
safetensors file per case, <out>/ops_<case>.safetensors, holding:

    the inputs          float32 by their names (x, w, b, table, q, k, v, ...); ids and masks int32
    g                   the upstream gradient, the output's shape
    out                 the output
    grad_<input>        the gradient of every float input
    (extras)            e.g. row_loss for cross-entropy, pe for the positional table
    __metadata__        {"op": <op name>, plus the op's parameters as strings}

Usage: make_op_refs.py --out DIR     (CTest runs this as a fixture before the C++ tests)
Prints one line per file written; exits non-zero on any failure.
"""

import argparse
import math
import os
import sys
import traceback
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402  (tests/python/safetensors_io.py)
import seed_variants  # noqa: E402  (seed 003's LayerNorm)

SEED = 1234
FILL = -1e9  # the seed's masked_fill value


def f32(value):
    """A Python float rounded to float32 and printed so that C++ std::stof gives that float back."""
    return repr(float(np.float32(value)))


def leaf(t):
    return t.detach().clone().float().requires_grad_(True)


def i32(t):
    return t.detach().to(torch.int32).contiguous()


# ------------------------------------------------------------------------- the seed's formulas --

def seed_attention(q, k, v, mask):
    """softmax(masked_fill(Q K^T / sqrt(dk), mask == 0, -1e9)) @ V, exactly as the seed writes it."""
    d_k = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, FILL)
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)


def seed_mask(B, Tq, Tk, key_keep=None, query_keep=None, causal=False):
    """The (B, 1, Tq, Tk) boolean mask the seed builds: src mask (B, 1, 1, Tk) on keys,
    tgt mask (B, 1, Tq, 1) on query rows, & no-peek (causal) lower triangle."""
    if key_keep is None and query_keep is None and not causal:
        return None
    m = torch.ones(B, 1, Tq, Tk, dtype=torch.bool)
    if key_keep is not None:
        m = m & (key_keep != 0).unsqueeze(1).unsqueeze(2)
    if query_keep is not None:
        m = m & (query_keep != 0).unsqueeze(1).unsqueeze(3)
    if causal:
        # The seed's nopeek: (1 - triu(ones(1, T, T), diagonal=1)).bool(); for Tq != Tk the query
        # rows are aligned to the end of the keys (key j visible to query i iff j <= i + Tk - Tq).
        m = m & torch.tril(torch.ones(Tq, Tk), diagonal=Tk - Tq).bool().unsqueeze(0)
    return m


def split_heads(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def combine_heads(x):
    B, H, T, dk = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * dk)


def sinusoidal_table(max_len, d_model):
    """The seed's PositionalEncoding buffer, line by line."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


# ------------------------------------------------------------------------------------ cases --
# Each case builder returns (leaves, ints, out, meta, extras, scalar): leaves are the float inputs
# whose gradients are saved; ints are saved as int32; extras are saved as they are.

def case_linear(B, T, K, N, bias=True, two_d=False):
    def build():
        lin = nn.Linear(K, N, bias=bias)
        x = leaf(torch.randn(B * T, K) if two_d else torch.randn(B, T, K))
        leaves = {"x": x, "w": lin.weight}
        if bias:
            leaves["b"] = lin.bias
        return leaves, {}, lin(x), {"bias": str(int(bias))}, {}, False
    return build


def case_matmul(batch, M, K, N, transpose_b):
    def build():
        a = leaf(torch.randn(*batch, M, K))
        b = leaf(torch.randn(*batch, N, K) if transpose_b else torch.randn(*batch, K, N))
        out = torch.matmul(a, b.transpose(-2, -1) if transpose_b else b)
        return {"a": a, "b": b}, {}, out, {"transpose_b": str(int(transpose_b))}, {}, False
    return build


def case_embedding(V, ids):
    def build():
        emb = nn.Embedding(V, 6)
        return {"table": emb.weight}, {"ids": ids}, emb(ids.long()), {}, {}, False
    return build


def case_add(shape):
    def build():
        a, b = leaf(torch.randn(*shape)), leaf(torch.randn(*shape))
        return {"a": a, "b": b}, {}, a + b, {}, {}, False
    return build


def case_scale(shape, s):
    def build():
        x = leaf(torch.randn(*shape))
        s32 = float(np.float32(s))
        return {"x": x}, {}, x * s32, {"s": f32(s32)}, {}, False
    return build


def case_relu(shape):
    def build():
        x = leaf(torch.randn(*shape))
        return {"x": x}, {}, torch.relu(x), {}, {}, False
    return build


def case_gelu(shape, spread):
    def build():
        x = leaf(torch.randn(*shape) * spread)
        return {"x": x}, {}, F.gelu(x), {}, {}, False  # approximate='none': the exact erf form
    return build


def case_gelu_tanh(shape, spread):
    def build():
        x = leaf(torch.randn(*shape) * spread)
        return {"x": x}, {}, F.gelu(x, approximate="tanh"), {}, {}, False
    return build


def case_silu(shape, spread):
    def build():
        x = leaf(torch.randn(*shape) * spread)
        return {"x": x}, {}, F.silu(x), {}, {}, False
    return build


def case_layernorm_seed003(shape, mean, std, eps=1e-6, constant_rows=()):
    """Seed 003's LayerNorm (unbiased std, eps added to the std). constant_rows: flat row indices
    set to 0.5 (exact in float, so the mean is exact and std exactly 0: torch's std backward then
    drops the std term, which qkv must match)."""
    def build():
        D = shape[-1]
        ln = seed_variants.Seed003LayerNorm(D, eps=eps)
        with torch.no_grad():
            ln.weight.copy_(1 + 0.5 * torch.randn(D))
            ln.bias.copy_(torch.randn(D))
        x = torch.randn(*shape) * std + mean
        for row in constant_rows:
            x.view(-1, D)[row] = 0.5
        x = leaf(x)
        return {"x": x, "weight": ln.weight, "bias": ln.bias}, {}, ln(x), {"eps": f32(eps)}, {}, False
    return build


def case_layernorm(shape, mean, std, special_weights=None, bias_std=1.0):
    """special_weights: {channel: value} overrides, e.g. tiny or zero weights (qkv's backward
    recovers xhat = (y - bias) / weight from the output when no |weight| is tiny)."""
    def build():
        D = shape[-1]
        ln = nn.LayerNorm(D, eps=1e-5)
        with torch.no_grad():  # non-trivial affine parameters so their gradients mean something
            ln.weight.copy_(1 + 0.5 * torch.randn(D))
            ln.bias.copy_(bias_std * torch.randn(D))
            for channel, value in (special_weights or {}).items():
                ln.weight[channel] = value
        x = leaf(torch.randn(*shape) * std + mean)
        return {"x": x, "weight": ln.weight, "bias": ln.bias}, {}, ln(x), {"eps": f32(1e-5)}, {}, False
    return build


def case_rms_norm(shape, mean, std, eps=1e-6):
    """T5's T5LayerNorm (RMSNorm: no mean subtraction, no bias), written out as T5 computes it."""
    def build():
        D = shape[-1]
        weight = leaf(1 + 0.5 * torch.randn(D))  # around 1, so that its gradient means something
        x = leaf(torch.randn(*shape) * std + mean)
        y = weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
        return {"x": x, "weight": weight}, {}, y, {"eps": f32(eps)}, {}, False
    return build


def case_softmax(shape, spread):
    def build():
        x = leaf(torch.randn(*shape) * spread)
        return {"x": x}, {}, torch.softmax(x, dim=-1), {}, {}, False
    return build


def mask_meta(key_keep, query_keep, causal):
    ints = {}
    if key_keep is not None:
        ints["key_keep"] = key_keep
    if query_keep is not None:
        ints["query_keep"] = query_keep
    return ints, {"causal": str(int(causal))}


def case_attention(B, H, Tq, Tk, dk, key_keep=None, query_keep=None, causal=False):
    def build():
        q = leaf(torch.randn(B, H, Tq, dk))
        k = leaf(torch.randn(B, H, Tk, dk))
        v = leaf(torch.randn(B, H, Tk, dk))
        out = seed_attention(q, k, v, seed_mask(B, Tq, Tk, key_keep, query_keep, causal))
        ints, meta = mask_meta(key_keep, query_keep, causal)
        return {"q": q, "k": k, "v": v}, ints, out, meta, {}, False
    return build


def case_mha_core(B, Tq, Tk, D, H, key_keep=None, query_keep=None, causal=False):
    """split_heads(xq, xk, xv) -> attention -> combine_heads: the seed's MultiHeadAttention without
    its projections, so the C++ side feeds strided head views into the fused kernel."""
    def build():
        xq = leaf(torch.randn(B, Tq, D))
        xk = leaf(torch.randn(B, Tk, D))
        xv = leaf(torch.randn(B, Tk, D))
        attn = seed_attention(split_heads(xq, H), split_heads(xk, H), split_heads(xv, H),
                              seed_mask(B, Tq, Tk, key_keep, query_keep, causal))
        ints, meta = mask_meta(key_keep, query_keep, causal)
        meta["heads"] = str(H)
        return {"xq": xq, "xk": xk, "xv": xv}, ints, combine_heads(attn), meta, {}, False
    return build


def t5_attention(q, k, v, bias, mask):
    """T5's attention as qkv fuses it: unscaled Q K^T plus the position bias, given (Tq, Tk, H) as an
    embedding lookup lays it out, then masked_fill(-1e9) (HF's T5 adds its mask; qkv fills)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) + bias.permute(2, 0, 1)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, FILL)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def case_attention_bias(B, H, Tq, Tk, dk, key_keep=None, query_keep=None, causal=False):
    def build():
        q = leaf(torch.randn(B, H, Tq, dk) * dk ** -0.25)  # unscaled scores of size O(1), as T5's init gives
        k = leaf(torch.randn(B, H, Tk, dk) * dk ** -0.25)
        v = leaf(torch.randn(B, H, Tk, dk))
        bias = leaf(torch.randn(Tq, Tk, H))
        out = t5_attention(q, k, v, bias, seed_mask(B, Tq, Tk, key_keep, query_keep, causal))
        ints, meta = mask_meta(key_keep, query_keep, causal)
        return {"q": q, "k": k, "v": v, "bias": bias}, ints, out, meta, {}, False
    return build


def case_mha_core_bias(B, Tq, Tk, D, H, key_keep=None, query_keep=None, causal=False):
    def build():
        scale = (D // H) ** -0.25
        xq = leaf(torch.randn(B, Tq, D) * scale)
        xk = leaf(torch.randn(B, Tk, D) * scale)
        xv = leaf(torch.randn(B, Tk, D))
        bias = leaf(torch.randn(Tq, Tk, H))
        attn = t5_attention(split_heads(xq, H), split_heads(xk, H), split_heads(xv, H), bias,
                            seed_mask(B, Tq, Tk, key_keep, query_keep, causal))
        ints, meta = mask_meta(key_keep, query_keep, causal)
        meta["heads"] = str(H)
        return {"xq": xq, "xk": xk, "xv": xv, "bias": bias}, ints, combine_heads(attn), meta, {}, False
    return build


def case_masked_fill(B, H, Tq, Tk, key_keep=None, query_keep=None, causal=False):
    def build():
        scores = leaf(torch.randn(B, H, Tq, Tk))
        out = scores.masked_fill(seed_mask(B, Tq, Tk, key_keep, query_keep, causal) == 0, FILL)
        ints, meta = mask_meta(key_keep, query_keep, causal)
        return {"scores": scores}, ints, out, meta, {}, False
    return build


def case_split_heads(B, T, D, H):
    def build():
        x = leaf(torch.randn(B, T, D))
        return {"x": x}, {}, split_heads(x, H), {"heads": str(H)}, {}, False
    return build


def case_combine_heads(B, H, T, dk):
    def build():
        x = leaf(torch.randn(B, H, T, dk))
        return {"x": x}, {}, combine_heads(x), {}, {}, False
    return build


def case_positional(B, T, D, max_len):
    def build():
        pe = sinusoidal_table(max_len, D)
        x = leaf(torch.randn(B, T, D))
        out = x + pe[:T].unsqueeze(0)  # the seed: x + self.pe[:, :x.size(1)]
        return {"x": x}, {}, out, {"max_len": str(max_len)}, {"pe": pe}, False
    return build


def case_reshape(in_shape, out_shape):
    def build():
        x = leaf(torch.randn(*in_shape))
        meta = {"shape": ",".join(str(d) for d in out_shape)}
        return {"x": x}, {}, x.contiguous().view(*out_shape), meta, {}, False
    return build


def case_cross_entropy(N, V, eps, ignored_rows, spread=2.0):
    def build():
        logits = leaf(torch.randn(N, V) * spread)
        targets = torch.randint(1, V, (N,))
        targets[list(ignored_rows)] = 0  # id 0 is the padding id the loss ignores
        crit = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=eps)
        loss = crit(logits, targets)
        row = F.cross_entropy(logits.detach(), targets, ignore_index=0, label_smoothing=eps, reduction="none")
        meta = {"ignore_index": "0", "label_smoothing": f32(eps)}
        return ({"logits": logits}, {"targets": targets}, loss.reshape(1), meta, {"row_loss": row}, True)
    return build


def cases():
    """(name, op, builder). Sizes are small and odd on purpose; B=1 and T=1 edge cases included."""
    # Masks: 1 = keep, 0 = padding / masked.
    key3x7 = torch.tensor([[1, 1, 1, 1, 1, 1, 1],
                           [1, 1, 1, 1, 0, 0, 0],
                           [1, 1, 1, 1, 1, 1, 0]], dtype=torch.int32)
    # Target-side: batch row 2 is fully padded on the query side (every score row masked, so its
    # softmax is uniform over -1e9 and no gradient reaches q or k from it), row 1 partially.
    query3x7 = torch.tensor([[1, 1, 1, 1, 1, 1, 1],
                             [1, 1, 1, 1, 1, 0, 0],
                             [0, 0, 0, 0, 0, 0, 0]], dtype=torch.int32)
    query3x5 = torch.tensor([[1, 1, 1, 1, 1],
                             [1, 1, 1, 0, 0],
                             [0, 0, 0, 0, 0]], dtype=torch.int32)
    ids_rep = torch.tensor([[3, 3, 3, 7, 0, 3, 10],
                            [1, 2, 1, 2, 1, 2, 1],
                            [5, 5, 5, 5, 5, 5, 5]], dtype=torch.int32)
    return [
        ("linear_b1_t1", "linear", case_linear(1, 1, 8, 6)),
        ("linear_odd", "linear", case_linear(3, 7, 12, 5)),
        ("linear_nobias", "linear", case_linear(3, 7, 12, 5, bias=False)),
        ("linear_2d", "linear", case_linear(1, 5, 12, 7, two_d=True)),
        ("matmul_b1", "matmul", case_matmul((1, 1), 1, 4, 3, False)),
        ("matmul_odd", "matmul", case_matmul((3, 2), 7, 5, 6, False)),
        ("matmul_tb", "matmul", case_matmul((3, 2), 7, 5, 6, True)),
        ("matmul_2d_tb", "matmul", case_matmul((), 5, 9, 3, True)),
        ("embedding_repeated", "embedding", case_embedding(11, ids_rep)),
        ("embedding_b1_t1", "embedding", case_embedding(4, torch.tensor([[2]], dtype=torch.int32))),
        ("add_odd", "add", case_add((3, 7, 12))),
        ("add_b1_t1", "add", case_add((1, 1, 12))),
        ("scale_odd", "scale", case_scale((3, 7, 12), 1.0 / math.sqrt(12))),
        ("relu_odd", "relu", case_relu((3, 7, 12))),
        ("gelu_odd", "gelu", case_gelu((3, 7, 12), 3.0)),
        ("layernorm_odd", "layernorm", case_layernorm((3, 7, 12), 0.0, 1.0)),
        ("layernorm_offset", "layernorm", case_layernorm((3, 7, 12), 5.0, 3.0)),
        ("layernorm_b1_t1", "layernorm", case_layernorm((1, 1, 12), 0.0, 1.0)),
        ("layernorm_smallish_weight", "layernorm",
         case_layernorm((3, 7, 12), 0.0, 1.0, {1: 0.05, 4: -0.02}, bias_std=1.0)),
        ("layernorm_small_weight", "layernorm",
         case_layernorm((3, 7, 12), 0.0, 1.0, {1: 1e-3, 4: -2e-4, 7: 5e-4}, bias_std=2.0)),
        ("layernorm_zero_weight", "layernorm", case_layernorm((3, 7, 12), 0.0, 1.0, {3: 0.0})),
        ("gelu_tanh_odd", "gelu_tanh", case_gelu_tanh((3, 7, 12), 3.0)),
        ("gelu_tanh_wide", "gelu_tanh", case_gelu_tanh((2, 5, 9), 8.0)),
        ("gelu_tanh_b1_t1", "gelu_tanh", case_gelu_tanh((1, 1, 5), 1.0)),
        ("silu_odd", "silu", case_silu((3, 7, 12), 3.0)),
        ("silu_wide", "silu", case_silu((2, 5, 9), 30.0)),
        ("layernorm_seed003_odd", "layernorm_seed003", case_layernorm_seed003((3, 7, 12), 0.0, 1.0)),
        ("layernorm_seed003_offset", "layernorm_seed003", case_layernorm_seed003((3, 7, 12), 5.0, 3.0)),
        ("layernorm_seed003_odd_width", "layernorm_seed003", case_layernorm_seed003((2, 5, 7), 0.0, 1.0)),
        ("layernorm_seed003_b1_t1", "layernorm_seed003", case_layernorm_seed003((1, 1, 12), 0.0, 1.0)),
        ("layernorm_seed003_width2", "layernorm_seed003", case_layernorm_seed003((4, 3, 2), 0.0, 1.0)),
        ("layernorm_seed003_large_eps", "layernorm_seed003",
         case_layernorm_seed003((3, 7, 12), 0.0, 0.3, eps=0.1)),
        ("layernorm_seed003_constant_row", "layernorm_seed003",
         case_layernorm_seed003((3, 4, 12), 0.0, 1.0, constant_rows=(5,))),
        ("rms_norm_odd", "rms_norm", case_rms_norm((3, 7, 12), 0.0, 1.0)),
        ("rms_norm_offset", "rms_norm", case_rms_norm((3, 7, 12), 5.0, 3.0)),
        ("rms_norm_width1", "rms_norm", case_rms_norm((4, 3, 1), 0.0, 1.0)),
        ("rms_norm_b1_t1", "rms_norm", case_rms_norm((1, 1, 12), 0.0, 1.0)),
        ("rms_norm_large_eps", "rms_norm", case_rms_norm((3, 7, 12), 0.0, 0.3, eps=0.1)),
        ("softmax_odd", "softmax", case_softmax((3, 2, 7, 7), 1.0)),
        ("softmax_peaked", "softmax", case_softmax((4, 33), 8.0)),
        ("softmax_c1", "softmax", case_softmax((5, 1), 1.0)),
        ("attention_b1_t1", "attention", case_attention(1, 1, 1, 1, 4)),
        ("attention_key_pad", "attention", case_attention(3, 2, 7, 7, 6, key_keep=key3x7)),
        ("attention_tgt", "attention", case_attention(3, 2, 7, 7, 6, query_keep=query3x7, causal=True)),
        ("attention_causal", "attention", case_attention(2, 3, 5, 5, 4, causal=True)),
        ("attention_cross", "attention", case_attention(3, 2, 5, 7, 6, key_keep=key3x7)),
        ("attention_cross_all", "attention",
         case_attention(3, 2, 5, 7, 6, key_keep=key3x7, query_keep=query3x5, causal=True)),
        ("attention_t1_masked", "attention",
         case_attention(2, 1, 1, 1, 4, key_keep=torch.tensor([[1], [0]], dtype=torch.int32))),
        ("mha_core_tgt", "mha_core", case_mha_core(3, 7, 7, 12, 3, query_keep=query3x7, causal=True)),
        ("mha_core_cross", "mha_core", case_mha_core(3, 5, 7, 12, 2, key_keep=key3x7)),
        ("attention_bias_key_pad", "attention_bias", case_attention_bias(3, 2, 7, 7, 6, key_keep=key3x7)),
        ("attention_bias_causal", "attention_bias", case_attention_bias(2, 3, 5, 5, 4, causal=True)),
        ("attention_bias_tgt", "attention_bias",
         case_attention_bias(3, 2, 7, 7, 6, key_keep=key3x7, query_keep=query3x7, causal=True)),
        ("attention_bias_t1_cross", "attention_bias",
         case_attention_bias(3, 2, 1, 7, 6, key_keep=key3x7, causal=True)),
        ("mha_core_bias_tgt", "mha_core_bias",
         case_mha_core_bias(3, 7, 7, 12, 3, query_keep=query3x7, causal=True)),
        ("mha_core_bias_t1_cross", "mha_core_bias", case_mha_core_bias(3, 1, 7, 12, 2, key_keep=key3x7)),
        ("masked_fill_tgt", "masked_fill",
         case_masked_fill(3, 2, 7, 7, key_keep=key3x7, query_keep=query3x7, causal=True)),
        ("masked_fill_cross", "masked_fill", case_masked_fill(3, 2, 5, 7, key_keep=key3x7, causal=True)),
        ("split_heads_odd", "split_heads", case_split_heads(3, 7, 12, 3)),
        ("split_heads_b1_t1", "split_heads", case_split_heads(1, 1, 12, 4)),
        ("combine_heads_odd", "combine_heads", case_combine_heads(3, 3, 7, 4)),
        ("combine_heads_b1_t1", "combine_heads", case_combine_heads(1, 4, 1, 3)),
        ("positional_odd", "positional", case_positional(3, 7, 12, 50)),
        ("positional_t_eq_max", "positional", case_positional(1, 1, 12, 1)),
        ("positional_d512", "positional", case_positional(1, 100, 512, 100)),
        ("reshape_odd", "reshape", case_reshape((3, 7, 12), (21, 12))),
        ("cross_entropy_eps0", "cross_entropy", case_cross_entropy(21, 11, 0.0, [2, 5, 6, 13, 20])),
        ("cross_entropy_eps01", "cross_entropy", case_cross_entropy(21, 11, 0.1, [2, 5, 6, 13, 20])),
        ("cross_entropy_b1", "cross_entropy", case_cross_entropy(1, 11, 0.0, [])),
        ("cross_entropy_b1_eps01", "cross_entropy", case_cross_entropy(1, 11, 0.1, [])),
        ("cross_entropy_large_logits", "cross_entropy", case_cross_entropy(6, 9, 0.1, [0], spread=30.0)),
        ("cross_entropy_all_ignored", "cross_entropy", case_cross_entropy(4, 7, 0.1, [0, 1, 2, 3])),
    ]


def write_case(out_dir, name, op, build):
    # Each case draws from its own fixed stream, keyed by its name: adding a case changes no other.
    torch.manual_seed(SEED + zlib.crc32(name.encode()))
    leaves, ints, out, meta, extras, scalar = build()
    g = torch.ones_like(out) if scalar else torch.randn_like(out)
    out.backward(g)
    tensors = {"g": g, "out": out.detach()}
    for key, t in leaves.items():
        if t.grad is None:
            raise RuntimeError(f"{name}: no gradient reached input '{key}'")
        tensors[key] = t.detach()
        tensors["grad_" + key] = t.grad.detach()
    for key, t in ints.items():
        tensors[key] = i32(t)
    for key, t in extras.items():
        tensors[key] = t.detach().float()
    for key, t in tensors.items():
        if t.dtype not in (torch.float32, torch.int32):
            raise RuntimeError(f"{name}: tensor '{key}' has dtype {t.dtype}")
        if t.dim() == 0:
            raise RuntimeError(f"{name}: tensor '{key}' is 0-dim")
    metadata = {"op": op, "case": name, "torch": torch.__version__}
    metadata.update(meta)
    path = os.path.join(out_dir, f"ops_{name}.safetensors")
    safetensors_io.save(path, {k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)
    # Read back: the file must hold exactly what was computed.
    back = safetensors_io.load(path)
    for key, t in tensors.items():
        if not np.array_equal(back[key], t.numpy(), equal_nan=True):
            raise RuntimeError(f"{path}: tensor '{key}' did not round-trip")
    print(f"wrote {path} ({op}: {', '.join(f'{k}{list(v.shape)}' for k, v in sorted(tensors.items()))})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write ops_*.safetensors into")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # Files of cases that no longer exist would otherwise linger (the C++ test checks that every
    # ops_*.safetensors it finds is one it knows). Only this script writes ops_* files.
    for stale in os.listdir(args.out):
        if stale.startswith("ops_") and stale.endswith(".safetensors"):
            os.unlink(os.path.join(args.out, stale))
    torch.set_num_threads(1)  # reductions in a fixed order: the same bytes on every run
    failures = 0
    for name, op, build in cases():
        try:
            write_case(args.out, name, op, build)
        except Exception:  # report every failing case, then fail the fixture
            failures += 1
            print(f"FAILED {name}:", file=sys.stderr)
            traceback.print_exc()
    if failures:
        print(f"{failures} case(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
