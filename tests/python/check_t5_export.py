#!/usr/bin/env python3
"""transformers loads what `qkv export --to hf` writes for an imported T5 model (v1.0 and v1.1
layouts), and computes the original model's numbers.

Usage: /usr/bin/python3 tests/python/check_t5_export.py QKV_BIN REF_DIR

For REF_DIR/hf_t5 and REF_DIR/hf_t5_v11 (make_t5_refs.py): `qkv import --from hf`, then
`qkv export --to hf` of that checkpoint into a temporary directory; T5ForConditionalGeneration
.from_pretrained of the export (strict: no missing, unexpected or mismatched weights), then against
REF_DIR/hf_t5_refs.json (transformers on the original directories): every pair's log-probability
within 1e-4 relative and greedy generate's ids identical. Prints "ok ..." on success.
"""

import json
import os
import subprocess
import sys
import tempfile

import torch

try:
    from transformers import T5ForConditionalGeneration
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_t5_export.py: {e}: install transformers with scripts/install_deps.sh")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")


def check(qkv, refs_dir, refs, name, tmp):
    ckpt, out = os.path.join(tmp, name + "_ckpt"), os.path.join(tmp, name + "_hf")
    run([qkv, "import", "--from", "hf", os.path.join(refs_dir, name), "--output-dir", ckpt])
    run([qkv, "export", "--to", "hf", ckpt, "--output-dir", out])
    model, info = T5ForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{name}: transformers reported {bad}")
    model.eval()
    worst = 0.0
    with torch.no_grad():
        for s, t, want in zip(refs["source_ids"], refs["target_ids"], refs[name]["log_probs"]):
            logits = model(input_ids=torch.tensor([s]), labels=torch.tensor([t])).logits[0]
            lp = torch.log_softmax(logits.double(), dim=-1)
            got = float(sum(lp[i, tok] for i, tok in enumerate(t)))
            worst = max(worst, abs(got - want) / max(1.0, abs(want)))
        if not worst <= 1e-4:
            sys.exit(f"{name}: log-probabilities differ from the original's: worst relative error {worst:.3g} > 1e-4")
        for s, want in zip(refs["source_ids"], refs[name]["greedy_ids"]):
            got = model.generate(torch.tensor([s]), num_beams=1, do_sample=False, max_new_tokens=refs["new_tokens"],
                                 synced_gpus=False)[0, 1:].tolist()
            if got != want:
                sys.exit(f"{name}: greedy output {got} differs from the original's {want}")
    return worst


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    qkv, refs_dir = sys.argv[1:]
    logging.set_verbosity_error()
    with open(os.path.join(refs_dir, "hf_t5_refs.json"), encoding="utf-8") as f:
        refs = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        worst = {name: check(qkv, refs_dir, refs, name, tmp) for name in ("hf_t5", "hf_t5_v11")}
    print("ok transformers loads qkv's T5 exports; worst log-probability relative error "
          + ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
          + f"; {len(refs['source_ids'])} greedy outputs identical each")


if __name__ == "__main__":
    main()
