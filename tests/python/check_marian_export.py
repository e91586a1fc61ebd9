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
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_checks import expect_greedy, expect_log_probs, import_then_export, load_strict  # noqa: E402

try:
    from transformers import MarianMTModel, MarianTokenizer
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_marian_export.py: {e}: install transformers with scripts/install_deps.sh")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    qkv, refs_dir = sys.argv[1:]
    logging.set_verbosity_error()
    with open(os.path.join(refs_dir, "hf_marian_refs.json"), encoding="utf-8") as f:
        refs = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out = os.path.join(tmp, "ckpt"), os.path.join(tmp, "hf")
        import_then_export(qkv, os.path.join(refs_dir, "hf_marian"), ckpt, out)
        model = load_strict(MarianMTModel, out, "hf_marian")
        tokenizer = MarianTokenizer.from_pretrained(out)
        for text, ids in zip(refs["sources"], refs["source_ids"]):
            if tokenizer(text).input_ids != ids:
                sys.exit(f"the exported tokenizer gives {tokenizer(text).input_ids} for {text!r}, expected {ids}")
        worst = expect_log_probs(model, refs["source_ids"], refs["target_ids"], refs["log_probs"], "hf_marian")
        expect_greedy(model, refs["source_ids"], refs["greedy_ids"], refs["new_tokens"], "hf_marian")
    print(f"ok transformers loads qkv's Marian export; worst log-probability relative error {worst:.3g}, "
          f"{len(refs['greedy_ids'])} greedy outputs identical")


if __name__ == "__main__":
    main()
