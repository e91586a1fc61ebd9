#!/usr/bin/env python3
"""transformers loads what `qkv export --to hf` writes, and computes qkv's logits.

Usage: /usr/bin/python3 tests/python/check_hf_export.py DIR NAME...

For each NAME: GPT2LMHeadModel.from_pretrained(DIR/NAME) (transformers' own loader: config.json,
model.safetensors, strict about missing weights), then for every ids.<i> of
DIR/NAME_qkv_logits.safetensors (written by qkv, HfExport.DISABLED_WriteForTransformers) the logits
of model(ids) against qkv's logits.<i>: max |a - b| / max |b| <= 1e-4. Prints "ok ..." on success.
"""

import sys

import torch

try:
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_hf_export.py: {e}: install transformers with scripts/install_deps.sh")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, names = sys.argv[1], sys.argv[2:]
    logging.set_verbosity_error()
    worst = {}
    for name in names:
        # output_loading_info lists missing / unexpected / mismatched keys: all must be empty.
        model, info = GPT2LMHeadModel.from_pretrained(f"{root}/{name}", output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            sys.exit(f"{name}: transformers reported {bad}")
        model.eval()
        ref = load_file(f"{root}/{name}_qkv_logits.safetensors")
        err = 0.0
        with torch.no_grad():
            for key in sorted(k for k in ref if k.startswith("ids.")):
                ids = ref[key].long()
                ours = model(ids).logits
                qkv = ref["logits." + key[4:]]
                if ours.shape != qkv.shape:
                    sys.exit(f"{name} {key}: transformers logits {tuple(ours.shape)} vs qkv {tuple(qkv.shape)}")
                e = float((ours - qkv).abs().max() / qkv.abs().max().clamp_min(1e-30))
                err = max(err, e)
        if not err <= 1e-4:
            sys.exit(f"{name}: transformers' logits differ from qkv's: max relative error {err:.3g} > 1e-4")
        worst[name] = err
    print("ok transformers loads qkv's export; worst logits relative error " +
          ", ".join(f"{n} {e:.3g}" for n, e in worst.items()))


if __name__ == "__main__":
    main()
