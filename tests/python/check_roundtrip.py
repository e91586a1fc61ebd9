#!/usr/bin/env python3
"""Can a PyTorch user load a qkv checkpoint into seed 000's Transformer?

Usage: /usr/bin/python3 tests/python/check_roundtrip.py CHECKPOINT_DIR

Builds seed_transformer.Transformer from CHECKPOINT_DIR/config.json, loads
CHECKPOINT_DIR/model.safetensors with load_state_dict -- strict on every parameter (all
present, right shapes and dtype, nothing extra); the positional_encoding.pe buffer, which
qkv checkpoints omit, keeps the table the constructor computed (see
seed_transformer.load_qkv_checkpoint) -- checks the loaded values equal the file's and
are finite, runs one forward pass, and prints "ok <number of tensors in the file>".
Exits non-zero with a message otherwise.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_transformer as st  # noqa: E402


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt = argv[1]
    try:
        config = st.read_config(ckpt)
        model = st.transformer_from_config(config)
        arrays = st.load_qkv_checkpoint(model, ckpt)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1

    state = model.state_dict()
    for name, array in arrays.items():
        if name == st.PE_KEY:
            continue
        if not np.isfinite(array).all():
            print(f"FAIL tensor '{name}' has non-finite values", file=sys.stderr)
            return 1
        if not np.array_equal(state[name].numpy(), array):
            print(f"FAIL tensor '{name}' differs after loading", file=sys.stderr)
            return 1

    model.eval()
    T = min(4, int(config["max_seq_length"]))
    with torch.no_grad():
        src = torch.arange(1, T + 1).remainder(int(config["src_vocab_size"]) - 1).add(1).unsqueeze(0)
        tgt = torch.arange(1, T + 1).remainder(int(config["tgt_vocab_size"]) - 1).add(1).unsqueeze(0)
        out = model(src, tgt)
    if out.shape != (1, T, int(config["tgt_vocab_size"])) or not torch.isfinite(out).all():
        print(f"FAIL forward pass gave shape {tuple(out.shape)} / non-finite values", file=sys.stderr)
        return 1

    print(f"ok {len(arrays)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
