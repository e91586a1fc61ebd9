#!/usr/bin/env python3
"""Seed 000's PyTorch Transformer, verbatim, plus helpers to use qkv checkpoints.

The classes below (MultiHeadAttention, PositionWiseFeedForward, PositionalEncoding,
EncoderLayer, DecoderLayer, Transformer with generate_mask) are copied from seed 000
without changes to structure, names or arithmetic, so state_dict keys are the seed's:

    encoder_embedding.weight, decoder_embedding.weight,
    encoder_layers.{i}.self_attn.W_{q,k,v,o}.{weight,bias},
    encoder_layers.{i}.feed_forward.fc{1,2}.{weight,bias},
    encoder_layers.{i}.norm{1,2}.{weight,bias},
    decoder_layers.{i}.{self_attn,cross_attn}.W_{q,k,v,o}.{weight,bias},
    decoder_layers.{i}.feed_forward.fc{1,2}.{weight,bias},
    decoder_layers.{i}.norm{1,2,3}.{weight,bias},
    fc.weight, fc.bias,
    positional_encoding.pe            <- buffer, see below

The positional-encoding buffer.
    The seed registers `pe` with register_buffer(), which is persistent, so it is part
    of Transformer.state_dict() as "positional_encoding.pe" (shape (1, max_seq_length,
    d_model)). We keep that behaviour exactly. qkv checkpoints (model.safetensors) do
    NOT store it: it is a deterministic function of (max_seq_length, d_model) and qkv
    recomputes it (src/qkv/kernels/positional.*). To load a qkv checkpoint use
    load_qkv_checkpoint(model, dir), which calls load_state_dict(strict=False) and then
    insists that the only missing key is "positional_encoding.pe" (kept as the value the
    constructor computed) and that nothing is unexpected -- i.e. strict on every
    parameter. If a file does contain "positional_encoding.pe" it must equal the
    recomputed table. Plain PyTorch equivalent:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        assert missing == ["positional_encoding.pe"] and not unexpected
    Conversely, to write a qkv-compatible checkpoint from this model, drop that key:
    qkv_state_dict(model).

Helpers added (nothing else differs from the seed):
    CONFIG_FIELDS, transformer_from_config(config), read_config(dir_or_file),
    qkv_state_dict(model), load_qkv_checkpoint(model, dir).
"""

import json
import math
import os
import sys

import torch
import torch.nn as nn

PE_KEY = "positional_encoding.pe"

# Fields of qkv's config.json that the seed's Transformer constructor takes, in its order.
CONFIG_FIELDS = ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "num_layers",
                 "d_ff", "max_seq_length", "dropout")


# ----------------------------------------------------------------- seed 000, verbatim --

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super(MultiHeadAttention, self).__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"

        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads

        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def scaled_dot_product_attention(self, Q, K, V, mask=None):
        attn_scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            attn_scores = attn_scores.masked_fill(mask == 0, -1e9)
        attn_probs = torch.softmax(attn_scores, dim=-1)
        output = torch.matmul(attn_probs, V)
        return output

    def split_heads(self, x):
        batch_size, seq_length, d_model = x.size()
        return x.view(batch_size, seq_length, self.num_heads, self.d_k).transpose(1, 2)

    def combine_heads(self, x):
        batch_size, _, seq_length, d_k = x.size()
        return x.transpose(1, 2).contiguous().view(batch_size, seq_length, self.d_model)

    def forward(self, Q, K, V, mask=None):
        Q = self.split_heads(self.W_q(Q))
        K = self.split_heads(self.W_k(K))
        V = self.split_heads(self.W_v(V))

        attn_output = self.scaled_dot_product_attention(Q, K, V, mask)
        output = self.W_o(self.combine_heads(attn_output))
        return output


class PositionWiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super(PositionWiseFeedForward, self).__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_seq_length):
        super(PositionalEncoding, self).__init__()

        pe = torch.zeros(max_seq_length, d_model)
        position = torch.arange(0, max_seq_length, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        # Persistent buffer, as in the seed: appears in state_dict() as
        # "positional_encoding.pe". qkv checkpoints omit it; see load_qkv_checkpoint().
        self.register_buffer('pe', pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, :x.size(1)]


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout):
        super(EncoderLayer, self).__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = PositionWiseFeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        attn_output = self.self_attn(x, x, x, mask)
        x = self.norm1(x + self.dropout(attn_output))
        ff_output = self.feed_forward(x)
        x = self.norm2(x + self.dropout(ff_output))
        return x


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout):
        super(DecoderLayer, self).__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = PositionWiseFeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, enc_output, src_mask, tgt_mask):
        attn_output = self.self_attn(x, x, x, tgt_mask)
        x = self.norm1(x + self.dropout(attn_output))
        attn_output = self.cross_attn(x, enc_output, enc_output, src_mask)
        x = self.norm2(x + self.dropout(attn_output))
        ff_output = self.feed_forward(x)
        x = self.norm3(x + self.dropout(ff_output))
        return x


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, max_seq_length, dropout):
        super(Transformer, self).__init__()
        self.encoder_embedding = nn.Embedding(src_vocab_size, d_model)
        self.decoder_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, max_seq_length)

        self.encoder_layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

        self.fc = nn.Linear(d_model, tgt_vocab_size)
        self.dropout = nn.Dropout(dropout)

    def generate_mask(self, src, tgt):
        src_mask = (src != 0).unsqueeze(1).unsqueeze(2)
        tgt_mask = (tgt != 0).unsqueeze(1).unsqueeze(3)
        seq_length = tgt.size(1)
        nopeak_mask = (1 - torch.triu(torch.ones(1, seq_length, seq_length), diagonal=1)).bool()
        tgt_mask = tgt_mask & nopeak_mask
        return src_mask, tgt_mask

    def forward(self, src, tgt):
        src_mask, tgt_mask = self.generate_mask(src, tgt)
        src_embedded = self.dropout(self.positional_encoding(self.encoder_embedding(src)))
        tgt_embedded = self.dropout(self.positional_encoding(self.decoder_embedding(tgt)))

        enc_output = src_embedded
        for enc_layer in self.encoder_layers:
            enc_output = enc_layer(enc_output, src_mask)

        dec_output = tgt_embedded
        for dec_layer in self.decoder_layers:
            dec_output = dec_layer(dec_output, enc_output, src_mask, tgt_mask)

        output = self.fc(dec_output)
        return output


# ------------------------------------------------------------------- helpers (added) --

def read_config(path):
    """Reads qkv's config.json; path is the file or the checkpoint directory holding it."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def transformer_from_config(config):
    """Builds the seed Transformer from a qkv config dict (or a path to config.json / its dir).

    Uses the CONFIG_FIELDS; other keys are ignored except pad_id, which must be 0 because
    the seed's generate_mask and CrossEntropyLoss(ignore_index=0) hard-code 0.
    """
    if not isinstance(config, dict):
        config = read_config(config)
    missing = [k for k in CONFIG_FIELDS if k not in config]
    if missing:
        raise ValueError(f"config is missing {missing}")
    if config.get("pad_id", 0) != 0:
        raise ValueError(f"the seed model hard-codes pad id 0, config has pad_id={config['pad_id']}")
    args = {k: config[k] for k in CONFIG_FIELDS}
    for k in CONFIG_FIELDS[:-1]:
        args[k] = int(args[k])
    args["dropout"] = float(args["dropout"])
    return Transformer(**args)


def config_of(model_args):
    """The config.json dict for constructor arguments {field: value} (adds pad_id 0)."""
    config = {k: model_args[k] for k in CONFIG_FIELDS}
    config["pad_id"] = 0
    return config


def qkv_state_dict(model):
    """model.state_dict() without the positional-encoding buffer: what qkv checkpoints hold."""
    return {k: v for k, v in model.state_dict().items() if k != PE_KEY}


def load_qkv_checkpoint(model, path):
    """Loads a qkv checkpoint (dir with model.safetensors, or the file) into a seed model.

    Strict on every parameter: all of them must be present with the right shape, and no
    other tensor may be present, except that "positional_encoding.pe" may be absent (it
    keeps the table the constructor computed) or present and equal to that table.
    Returns the {name: numpy array} read from the file.
    """
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import safetensors_io  # noqa: E402  (sibling module)

    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    arrays = safetensors_io.load(path)
    expected = model.state_dict()
    tensors = {}
    for name, array in arrays.items():
        if name in expected and array.dtype != torch.empty(0, dtype=expected[name].dtype).numpy().dtype:
            raise ValueError(f"{path}: tensor '{name}' has dtype {array.dtype}, "
                             f"model expects {expected[name].dtype}")
        tensors[name] = torch.from_numpy(array)
    if PE_KEY in tensors:
        pe = tensors.pop(PE_KEY)
        if pe.shape != expected[PE_KEY].shape or not torch.allclose(pe, expected[PE_KEY], atol=1e-6, rtol=0):
            raise ValueError(f"{path}: stored {PE_KEY} differs from the sinusoidal table")
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if list(missing) != [PE_KEY] or unexpected:
        raise ValueError(f"{path}: missing tensors {[m for m in missing if m != PE_KEY]}, "
                         f"unexpected tensors {list(unexpected)}")
    return arrays
