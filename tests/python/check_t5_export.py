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
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_checks import expect_greedy, expect_log_probs, import_then_export, load_strict  # noqa: E402

try:
    from transformers import T5ForConditionalGeneration
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_t5_export.py: {e}: install transformers with scripts/install_deps.sh")


def check(qkv, refs_dir, refs, name, tmp):
    ckpt, out = os.path.join(tmp, name + "_ckpt"), os.path.join(tmp, name + "_hf")
    import_then_export(qkv, os.path.join(refs_dir, name), ckpt, out)
    model = load_strict(T5ForConditionalGeneration, out, name)
    worst = expect_log_probs(model, refs["source_ids"], refs["target_ids"], refs[name]["log_probs"], name)
    expect_greedy(model, refs["source_ids"], refs[name]["greedy_ids"], refs["new_tokens"], name)
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
