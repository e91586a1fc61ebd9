#!/usr/bin/env python3
"""transformers loads what `qkv export --to hf` writes for an imported Marian model, and computes
the original model's numbers.

Usage: /usr/bin/python3 tests/python/check_marian_export.py QKV_BIN REF_DIR

`qkv import --from hf REF_DIR/hf_marian`, then `qkv export --to hf` of that checkpoint into a
temporary directory; MarianMTModel.from_pretrained and MarianTokenizer.from_pretrained of the export
(strict: no missing, unexpected or mismatched weights), then against REF_DIR/hf_marian_refs.json
(make_marian_refs.py, transformers on the original directory): the tokenizer's ids of every source,
every pair's log-probability within 1e-4 relative, and greedy generate's ids identical. Prints
"ok ..." on success.
"""

import json
import os
import subprocess
import sys
import tempfile

import torch

try:
    from transformers import MarianMTModel, MarianTokenizer
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_marian_export.py: {e}: install transformers with scripts/install_deps.sh")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    qkv, refs_dir = sys.argv[1:]
    logging.set_verbosity_error()
    with open(os.path.join(refs_dir, "hf_marian_refs.json"), encoding="utf-8") as f:
        refs = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out = os.path.join(tmp, "ckpt"), os.path.join(tmp, "hf")
        run([qkv, "import", "--from", "hf", os.path.join(refs_dir, "hf_marian"), "--output-dir", ckpt])
        run([qkv, "export", "--to", "hf", ckpt, "--output-dir", out])
        model, info = MarianMTModel.from_pretrained(out, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            sys.exit(f"transformers reported {bad}")
        model.eval()
        tokenizer = MarianTokenizer.from_pretrained(out)
        for text, ids in zip(refs["sources"], refs["source_ids"]):
            if tokenizer(text).input_ids != ids:
                sys.exit(f"the exported tokenizer gives {tokenizer(text).input_ids} for {text!r}, expected {ids}")
        worst = 0.0
        with torch.no_grad():
            for s, t, want in zip(refs["source_ids"], refs["target_ids"], refs["log_probs"]):
                logits = model(input_ids=torch.tensor([s]), labels=torch.tensor([t])).logits[0]
                lp = torch.log_softmax(logits.double(), dim=-1)
                got = float(sum(lp[i, tok] for i, tok in enumerate(t)))
                worst = max(worst, abs(got - want) / max(1.0, abs(want)))
            if not worst <= 1e-4:
                sys.exit(f"log-probabilities differ from the original's: worst relative error {worst:.3g} > 1e-4")
            for s, want in zip(refs["source_ids"], refs["greedy_ids"]):
                got = model.generate(torch.tensor([s]), num_beams=1, do_sample=False, max_new_tokens=refs["new_tokens"],
                                     synced_gpus=False)[0, 1:].tolist()
                if got != want:
                    sys.exit(f"greedy output {got} differs from the original's {want}")
    print(f"ok transformers loads qkv's Marian export; worst log-probability relative error {worst:.3g}, "
          f"{len(refs['greedy_ids'])} greedy outputs identical")


if __name__ == "__main__":
    main()
