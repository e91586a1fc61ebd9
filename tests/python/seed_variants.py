#!/usr/bin/env python3
"""The seed Transformer with qkv's model options, for reference data (make_op_refs.py,
make_model_refs.py). seed_transformer.py stays seed 000 verbatim; this module builds the same
module tree (same state_dict keys) with the config.json options that change the arithmetic:

    norm            "post" (seed 000): norm(x + dropout(sublayer(x)))
                    "pre": x + dropout(sublayer(norm(x))), plus a final norm per stack
                    (encoder_norm, decoder_norm), as qkv's models/transformer.h
    layer_norm      "standard" (nn.LayerNorm) or "seed003": seed 003's LayerNorm (Seed003LayerNorm)
    layer_norm_eps  the eps of either
    activation      "relu", "gelu" (erf) or "gelu_tanh" (F.gelu(x, approximate='tanh'))
    ffn_dropout     seed 003's FeedForward: linear2(dropout(relu(linear1(x)))); 0 = seed 000's

Other options (mask_fill, scale_embeddings, tie_output_embedding, attention_dropout) must keep
seed 000's values: variant_transformer_from_config refuses anything else.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_transformer as st  # noqa: E402

SEED000_DEFAULTS = {"mask_fill": "-1e9", "scale_embeddings": False, "tie_output_embedding": False,
                    "attention_dropout": 0.0, "pad_id": 0}


class Seed003LayerNorm(nn.Module):
    """Seed 003's LayerNorm, verbatim except that a_2 / b_2 are named weight / bias (qkv's names).

    x.std is the unbiased std (divides by D - 1) and eps is added to it, not to the variance."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh}


class FeedForward(nn.Module):
    """Seed 003's FeedForward (linear2(dropout(relu(linear1(x))))) with seed 000's names fc1 / fc2
    and a choice of activation; dropout 0 makes it seed 000's PositionWiseFeedForward."""

    def __init__(self, d_model, d_ff, activation, dropout):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x):
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


class Options:
    def __init__(self, config):
        self.pre_norm = config.get("norm", "post") == "pre"
        self.layer_norm = config.get("layer_norm", "standard")
        self.eps = float(config.get("layer_norm_eps", 1e-5))
        self.activation = config.get("activation", "relu")
        self.ffn_dropout = float(config.get("ffn_dropout", 0.0))

    def norm(self, d_model):
        if self.layer_norm == "seed003":
            return Seed003LayerNorm(d_model, eps=self.eps)
        return nn.LayerNorm(d_model, eps=self.eps)

    def feed_forward(self, d_model, d_ff):
        return FeedForward(d_model, d_ff, self.activation, self.ffn_dropout)


def residual(opts, norm, dropout, x, sublayer):
    if opts.pre_norm:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout, opts):
        super().__init__()
        self.self_attn = st.MultiHeadAttention(d_model, num_heads)
        self.feed_forward = opts.feed_forward(d_model, d_ff)
        self.norm1 = opts.norm(d_model)
        self.norm2 = opts.norm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.opts = opts

    def forward(self, x, mask):
        x = residual(self.opts, self.norm1, self.dropout, x, lambda h: self.self_attn(h, h, h, mask))
        return residual(self.opts, self.norm2, self.dropout, x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout, opts):
        super().__init__()
        self.self_attn = st.MultiHeadAttention(d_model, num_heads)
        self.cross_attn = st.MultiHeadAttention(d_model, num_heads)
        self.feed_forward = opts.feed_forward(d_model, d_ff)
        self.norm1 = opts.norm(d_model)
        self.norm2 = opts.norm(d_model)
        self.norm3 = opts.norm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.opts = opts

    def forward(self, x, enc_output, src_mask, tgt_mask):
        x = residual(self.opts, self.norm1, self.dropout, x, lambda h: self.self_attn(h, h, h, tgt_mask))
        x = residual(self.opts, self.norm2, self.dropout, x,
                     lambda h: self.cross_attn(h, enc_output, enc_output, src_mask))
        return residual(self.opts, self.norm3, self.dropout, x, self.feed_forward)


class VariantTransformer(nn.Module):
    """Seed 000's Transformer (same forward, masks and names) with the options above."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, max_seq_length,
                 dropout, opts):
        super().__init__()
        self.encoder_embedding = nn.Embedding(src_vocab_size, d_model)
        self.decoder_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = st.PositionalEncoding(d_model, max_seq_length)
        self.encoder_layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout, opts) for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList(
            [DecoderLayer(d_model, num_heads, d_ff, dropout, opts) for _ in range(num_layers)])
        self.fc = nn.Linear(d_model, tgt_vocab_size)
        self.dropout = nn.Dropout(dropout)
        if opts.pre_norm:  # registered after fc, as qkv registers them
            self.encoder_norm = opts.norm(d_model)
            self.decoder_norm = opts.norm(d_model)
        self.opts = opts

    generate_mask = st.Transformer.generate_mask

    def forward(self, src, tgt):
        src_mask, tgt_mask = self.generate_mask(src, tgt)
        enc_output = self.dropout(self.positional_encoding(self.encoder_embedding(src)))
        for enc_layer in self.encoder_layers:
            enc_output = enc_layer(enc_output, src_mask)
        if self.opts.pre_norm:
            enc_output = self.encoder_norm(enc_output)
        dec_output = self.dropout(self.positional_encoding(self.decoder_embedding(tgt)))
        for dec_layer in self.decoder_layers:
            dec_output = dec_layer(dec_output, enc_output, src_mask, tgt_mask)
        if self.opts.pre_norm:
            dec_output = self.decoder_norm(dec_output)
        return self.fc(dec_output)


def variant_transformer_from_config(config):
    """Builds VariantTransformer from a qkv config dict."""
    for key, seed_value in SEED000_DEFAULTS.items():
        if config.get(key, seed_value) != seed_value:
            raise ValueError(f"seed_variants does not model {key}={config[key]!r}")
    args = {k: int(config[k]) for k in st.CONFIG_FIELDS[:-1]}
    args["dropout"] = float(config["dropout"])
    return VariantTransformer(**args, opts=Options(config))
