"""qkv: Transformer models in C++ (translation, generation, embeddings, training), from Python.

The compiled part lives in ``qkv._core``; it is loaded on first use, so pure-Python parts such as
``qkv.plot`` work without it.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

# libgomp reads this when qkv._core loads it: a short spin before idle threads sleep, so two threads
# do not crawl when another process holds a core (see src/qkv/cli/omp_wait.h); the user's own
# OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

__all__ = [
    "Translator",
    "Translation",
    "TranslationResult",
    "Generator",
    "Generation",
    "GenerationResult",
    "Encoder",
    "ClassificationResult",
    "Model",
    "Trainer",
    "TrainingArguments",
    "load_checkpoint",
    "import_hf",
    "score",
    "set_num_threads",
    "num_threads",
    "kernels",
    "plot",
    "__version__",
]

_PYTHON_NAMES = {"plot": "qkv.plot", "Trainer": "qkv.training", "TrainingArguments": "qkv.training"}
_CORE_NAMES = frozenset(__all__) - set(_PYTHON_NAMES) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name == "plot":
        return importlib.import_module("qkv.plot")
    if name in _PYTHON_NAMES:
        return getattr(importlib.import_module(_PYTHON_NAMES[name]), name)
    if name in _CORE_NAMES or name == "__version__":
        core = importlib.import_module("qkv._core")
        return getattr(core, name)
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
