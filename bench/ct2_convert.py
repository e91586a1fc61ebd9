#!/usr/bin/env python3
"""Converts a qkv encoder-decoder checkpoint to a CTranslate2 model directory (issue 11, item 3).

    build/bench-venv/bin/python bench/ct2_convert.py --checkpoint runs/bible-mt/best --out /tmp/bible-ct2 [--force]
        [--quantization int8]

Reads CKPT/config.json, CKPT/model.safetensors and CKPT/{source,target}.spm.model and fills
CTranslate2's TransformerSpec through its Python spec API, so that CTranslate2 computes what qkv
computes:
  * the seed's sinusoidal table (sin and cos interleaved, not CTranslate2's own [sin | cos] layout)
    is given explicitly, computed with the same float32 libm calls as qkv's kernel;
  * embeddings are scaled by sqrt(d_model) only when the config says scale_embeddings;
  * post-norm (the seed) or pre-norm with the final encoder/decoder norms, per config "norm";
  * the LayerNorm epsilon goes to the model config (layer_norm_epsilon);
  * the vocabularies are the SentencePiece pieces by id, so CTranslate2's decoder start token and
    end token are qkv's bos_id and eos_id pieces.
A config it cannot express (decoder-only or encoder-only, seed 003's unbiased-std LayerNorm, ...) is
refused naming the field. Needs the ctranslate2, sentencepiece, safetensors and numpy packages
(bench/setup_peers.sh installs them into build/bench-venv).
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import sys

import numpy as np


class ConvertError(Exception):
    pass


# qkv's TransformerConfig defaults (src/qkv/models/config.h): config.json may omit a default field.
DEFAULTS = {
    "architecture": "encoder-decoder", "d_model": 512, "num_heads": 8, "num_layers": 6, "d_ff": 2048,
    "max_seq_length": 100, "pad_id": 0, "bos_id": 2, "eos_id": 3, "norm": "post", "activation": "relu",
    "layer_norm_eps": 1e-5, "layer_norm": "standard", "scale_embeddings": False,
    "tie_output_embedding": False, "mask_fill": "-1e9", "positions": "sinusoidal",
    "src_vocab_size": 5000, "tgt_vocab_size": 5000,
}


def load_config(ckpt):
    path = os.path.join(ckpt, "config.json")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: no such file (a qkv checkpoint holds config.json and model.safetensors)")
    with open(path, encoding="utf-8") as f:
        c = dict(DEFAULTS, **json.load(f))

    def refuse(field, why):
        raise ConvertError(f"{path}: field \"{field}\" = {json.dumps(c[field])}: {why}")

    if c["architecture"] != "encoder-decoder":
        refuse("architecture", "only encoder-decoder (translation) checkpoints convert to a CTranslate2 Translator")
    if c["layer_norm"] != "standard":
        # CTranslate2's LayerNorm divides by sqrt(biased var + eps); seed 003's by (unbiased std + eps).
        refuse("layer_norm", "CTranslate2 has only the standard LayerNorm")
    if c["norm"] not in ("post", "pre"):
        refuse("norm", "expected \"post\" or \"pre\"")
    if c["activation"] not in ("relu", "gelu", "gelu_tanh"):
        refuse("activation", "expected relu, gelu or gelu_tanh")
    if c["positions"] != "sinusoidal":
        refuse("positions", "an encoder-decoder model uses the sinusoidal table")
    if c["mask_fill"] not in ("-1e9", "-inf"):
        # Both give padded keys a weight of exactly 0 (exp underflows), as CTranslate2's masking does.
        refuse("mask_fill", "expected \"-1e9\" or \"-inf\"")
    if c["d_model"] % c["num_heads"]:
        refuse("num_heads", "must divide d_model")
    return c


def sinusoidal_table(max_len, d_model):
    """qkv's table (src/qkv/kernels/positional.cpp) operation for operation: float32 products and
    the C library's expf / sinf / cosf, so the values are bit-identical to the ones qkv adds."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    for name in ("expf", "sinf", "cosf"):
        getattr(libm, name).restype = ctypes.c_float
        getattr(libm, name).argtypes = [ctypes.c_float]
    f32 = np.float32
    step = f32(-(math.log(10000.0) / float(d_model)))  # computed in double, then rounded, as in C++
    pe = np.zeros((max_len, d_model), dtype=np.float32)
    divs = [f32(libm.expf(f32(f32(2 * i) * step))) for i in range((d_model + 1) // 2)]
    for pos in range(max_len):
        for i, div in enumerate(divs):
            angle = f32(f32(pos) * div)
            pe[pos, 2 * i] = libm.sinf(angle)
            if 2 * i + 1 < d_model:
                pe[pos, 2 * i + 1] = libm.cosf(angle)
    return pe


def vocabulary(ckpt, side, size):
    """The pieces of CKPT/<side>.spm.model by id: CTranslate2 maps tokens to ids through this list."""
    import sentencepiece as spm

    path = os.path.join(ckpt, f"{side}.spm.model")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: no such file (CTranslate2 needs the {side} vocabulary as token strings)")
    sp = spm.SentencePieceProcessor(model_file=path)
    if sp.get_piece_size() != size:
        raise ConvertError(f"{path}: {sp.get_piece_size()} pieces, but config.json says "
                           f"{'src' if side == 'source' else 'tgt'}_vocab_size {size}")
    pieces = [sp.id_to_piece(i) for i in range(size)]
    if len(set(pieces)) != size:
        raise ConvertError(f"{path}: pieces are not unique")
    return pieces, sp


class Weights:
    """model.safetensors, each tensor taken once; leftovers are reported (a name we do not map)."""

    def __init__(self, path):
        from safetensors.numpy import load_file

        if not os.path.isfile(path):
            raise ConvertError(f"{path}: no such file")
        self.path, self.t, self.used = path, load_file(path), set()

    def __call__(self, name):
        if name not in self.t:
            raise ConvertError(f"{self.path}: no tensor '{name}'")
        self.used.add(name)
        return np.ascontiguousarray(self.t[name], dtype=np.float32)

    def has(self, name):
        return name in self.t

    def unused(self):
        return sorted(set(self.t) - self.used)


def set_linear(spec, w, name):
    spec.weight = w(name + ".weight")
    if w.has(name + ".bias"):
        spec.bias = w(name + ".bias")


def set_fused(spec, w, names):
    # CTranslate2 projects Q, K, V (self-attention) or K, V (cross-attention) with one matrix:
    # the rows of the separate projections stacked in that order.
    spec.weight = np.concatenate([w(n + ".weight") for n in names])
    if all(w.has(n + ".bias") for n in names):
        spec.bias = np.concatenate([w(n + ".bias") for n in names])


def set_norm(spec, w, name):
    spec.gamma, spec.beta = w(name + ".weight"), w(name + ".bias")


def set_attention(spec, w, prefix, self_attention):
    if self_attention:
        set_fused(spec.linear[0], w, [f"{prefix}.W_q", f"{prefix}.W_k", f"{prefix}.W_v"])
    else:
        set_linear(spec.linear[0], w, f"{prefix}.W_q")
        set_fused(spec.linear[1], w, [f"{prefix}.W_k", f"{prefix}.W_v"])
    set_linear(spec.linear[-1], w, f"{prefix}.W_o")


def set_ffn(spec, w, prefix):
    set_linear(spec.linear_0, w, f"{prefix}.fc1")
    set_linear(spec.linear_1, w, f"{prefix}.fc2")


def build_spec(ckpt, log=print):
    from ctranslate2.specs import common_spec, transformer_spec

    c = load_config(ckpt)
    w = Weights(os.path.join(ckpt, "model.safetensors"))
    pre = c["norm"] == "pre"
    act = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
           "gelu_tanh": common_spec.Activation.GELUTanh}[c["activation"]]
    L, H = c["num_layers"], c["num_heads"]
    enc = transformer_spec.TransformerEncoderSpec(L, H, pre_norm=pre, activation=act)
    dec = transformer_spec.TransformerDecoderSpec(L, H, pre_norm=pre, activation=act)

    pe = sinusoidal_table(c["max_seq_length"], c["d_model"])
    if w.has("positional_encoding.pe"):  # qkv stores its table too: check ours against it
        stored = w("positional_encoding.pe").reshape(pe.shape)
        diff = int(np.sum(stored.view(np.uint32) != pe.view(np.uint32)))
        log(f"positional table {pe.shape}: {'identical to' if diff == 0 else f'{diff} values differ from'} "
            f"the checkpoint's stored copy (max |diff| {float(np.max(np.abs(stored - pe))):.3g})")

    for side, spec, emb in (("encoder", enc, enc.embeddings[0]), ("decoder", dec, dec.embeddings)):
        emb.weight = w(f"{side}_embedding.weight")
        spec.scale_embeddings = bool(c["scale_embeddings"])
        spec.position_encodings.encodings = pe
        if pre:
            set_norm(spec.layer_norm, w, f"{side}_norm")
    for i, layer in enumerate(enc.layer):
        p = f"encoder_layers.{i}"
        set_attention(layer.self_attention, w, f"{p}.self_attn", True)
        set_norm(layer.self_attention.layer_norm, w, f"{p}.norm1")
        set_ffn(layer.ffn, w, f"{p}.feed_forward")
        set_norm(layer.ffn.layer_norm, w, f"{p}.norm2")
    for i, layer in enumerate(dec.layer):
        p = f"decoder_layers.{i}"
        set_attention(layer.self_attention, w, f"{p}.self_attn", True)
        set_norm(layer.self_attention.layer_norm, w, f"{p}.norm1")
        set_attention(layer.attention, w, f"{p}.cross_attn", False)
        set_norm(layer.attention.layer_norm, w, f"{p}.norm2")
        set_ffn(layer.ffn, w, f"{p}.feed_forward")
        set_norm(layer.ffn.layer_norm, w, f"{p}.norm3")
    # A tied output layer is stored under decoder_embedding.weight, fc.weight possibly absent.
    dec.projection.weight = w("fc.weight") if w.has("fc.weight") else w("decoder_embedding.weight")
    dec.projection.bias = w("fc.bias")
    if w.unused():
        raise ConvertError(f"{w.path}: tensors this converter does not map: {', '.join(w.unused()[:5])}")

    spec = transformer_spec.TransformerSpec(enc, dec)
    src_pieces, _ = vocabulary(ckpt, "source", c["src_vocab_size"])
    tgt_pieces, tgt_sp = vocabulary(ckpt, "target", c["tgt_vocab_size"])
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    cfg = spec.config
    cfg.bos_token = cfg.decoder_start_token = tgt_pieces[c["bos_id"]]
    cfg.eos_token = tgt_pieces[c["eos_id"]]
    unk = tgt_sp.unk_id()
    if unk >= 0:
        cfg.unk_token = tgt_pieces[unk]
    cfg.add_source_bos = cfg.add_source_eos = False  # qkv feeds the encoder the pieces alone
    cfg.layer_norm_epsilon = float(c["layer_norm_eps"])
    return spec, c


def convert(ckpt, out, quantization=None, force=False, log=print):
    import ctranslate2

    class QkvConverter(ctranslate2.converters.Converter):
        def _load(self):
            return build_spec(ckpt, log)[0]

    return QkvConverter().convert(out, quantization=quantization, force=force)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="qkv checkpoint directory")
    ap.add_argument("--out", required=True, help="CTranslate2 model directory to write")
    ap.add_argument("--quantization", default=None, help="CTranslate2 weight type (int8, float16, ...; default float32)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    a = ap.parse_args()
    try:
        convert(a.checkpoint, a.out, a.quantization, a.force, log=lambda m: print(m, file=sys.stderr))
    except (ConvertError, RuntimeError) as e:
        sys.exit(f"ct2_convert: {e}")
    print(a.out)


if __name__ == "__main__":
    main()
