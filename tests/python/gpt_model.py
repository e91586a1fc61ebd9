#!/usr/bin/env python3
"""A plain PyTorch decoder-only (GPT-2 style) model with qkv's parameter names, for reference data
(make_gpt_refs.py). It is the model of src/qkv/models/causal_lm.h:

    x = dropout(token_embedding(ids) + pos)         pos: position_embedding.weight[t] ("learned")
                                                    or seed 000's sinusoidal table ("sinusoidal")
    block:  x = x + dropout(self_attn(norm1(x)))    pre-LN, causal self-attention
            x = x + dropout(feed_forward(norm2(x))) fc2(gelu(fc1(.))), erf or tanh GELU
    logits = lm_head(final_norm(x))                 no bias; lm_head.weight IS token_embedding.weight
                                                    when tie_output_embedding

Attention and the sinusoidal table are seed 000's own classes (seed_transformer.MultiHeadAttention:
scores masked_fill(mask == 0, -1e9), softmax, @ V, heads split as view(B, T, H, dk).transpose(1, 2);
seed_transformer.PositionalEncoding: the persistent buffer positional_encoding.pe (1, T, D)).

state_dict keys:
    token_embedding.weight (V, D)
    position_embedding.weight (max_seq_length, D)          learned positions only
    positional_encoding.pe (1, max_seq_length, D)          sinusoidal positions only (a buffer)
    layers.N.norm1.{weight,bias}, layers.N.self_attn.{W_q,W_k,W_v,W_o}.{weight,bias},
    layers.N.norm2.{weight,bias}, layers.N.feed_forward.{fc1,fc2}.{weight,bias},
    final_norm.{weight,bias}, lm_head.weight (V, D)
A tied model's state_dict() holds the shared matrix under both token_embedding.weight and
lm_head.weight; its named_parameters() lists it once, as token_embedding.weight.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_transformer as st  # noqa: E402

# config.json fields of a decoder-only model (all required by gpt_from_config).
CONFIG_FIELDS = ("format_version", "architecture", "vocab_size", "d_model", "num_heads", "num_layers",
                 "d_ff", "max_seq_length", "dropout", "attention_dropout", "activation", "positions",
                 "layer_norm_eps", "tie_output_embedding", "pad_id", "bos_id", "eos_id")

ACTIVATIONS = {
    "gelu": F.gelu,                                         # exact (erf)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),   # GPT-2's approximation
}


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, activation):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x):
        return self.fc2(self.activation(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, activation, eps, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.self_attn = st.MultiHeadAttention(d_model, num_heads)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.feed_forward = FeedForward(d_model, d_ff, activation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, num_layers, d_ff, max_seq_length,
                 dropout=0.0, activation="gelu_tanh", positions="learned", layer_norm_eps=1e-5,
                 tie_output_embedding=True):
        super().__init__()
        if positions not in ("learned", "sinusoidal"):
            raise ValueError(f"positions must be learned or sinusoidal, got {positions!r}")
        self.max_seq_length = max_seq_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.position_embedding = nn.Embedding(max_seq_length, d_model)
        else:
            self.positional_encoding = st.PositionalEncoding(d_model, max_seq_length)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([Block(d_model, num_heads, d_ff, activation, layer_norm_eps, dropout)
                                     for _ in range(num_layers)])
        self.final_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_output_embedding:
            self.lm_head.weight = self.token_embedding.weight

    def forward(self, ids):
        """ids (B, T) long -> logits (B, T, V); position t of every row is t."""
        T = ids.size(1)
        if T > self.max_seq_length:
            raise ValueError(f"sequence length {T} exceeds max_seq_length {self.max_seq_length}")
        x = self.token_embedding(ids)
        if hasattr(self, "position_embedding"):
            x = x + self.position_embedding.weight[:T]
        else:
            x = self.positional_encoding(x)  # x + pe[:, :T]
        x = self.dropout(x)
        mask = (1 - torch.triu(torch.ones(1, 1, T, T), diagonal=1)).bool()  # 1 where key <= query
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.final_norm(x))


def gpt_from_config(config):
    """The GPT of a qkv decoder-only config dict."""
    missing = [k for k in CONFIG_FIELDS if k not in config]
    if missing:
        raise ValueError(f"config is missing {missing}")
    if config["architecture"] != "decoder-only":
        raise ValueError(f"architecture {config['architecture']!r} is not decoder-only")
    if config["attention_dropout"] != 0.0:
        raise ValueError("attention dropout is not modelled here")
    return GPT(int(config["vocab_size"]), int(config["d_model"]), int(config["num_heads"]),
               int(config["num_layers"]), int(config["d_ff"]), int(config["max_seq_length"]),
               dropout=float(config["dropout"]), activation=config["activation"],
               positions=config["positions"], layer_norm_eps=float(config["layer_norm_eps"]),
               tie_output_embedding=bool(config["tie_output_embedding"]))


def named_parameters_qkv(model):
    """(name, parameter) for every parameter name of state_dict(), in its order: a tied matrix
    appears under both token_embedding.weight and lm_head.weight (named_parameters() lists it once)."""
    by_id = {id(p): p for p in model.parameters()}
    return [(k, by_id[id(_param_of(model, k))]) for k in model.state_dict()
            if id(_param_of(model, k)) in by_id]


def _param_of(model, name):
    module_name, _, attr = name.rpartition(".")
    return getattr(model.get_submodule(module_name), attr)
