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


# What -march=x86-64-v3 (qkv's build) may use, as /proc/cpuinfo names them, and as qkv's CLI names
# them (src/qkv/core/cpu_baseline.cpp): lzcnt is "abm" there.
_BASELINE_FLAGS = (("avx", "AVX"), ("avx2", "AVX2"), ("fma", "FMA"), ("f16c", "F16C"), ("bmi1", "BMI1"),
                   ("bmi2", "BMI2"), ("abm", "LZCNT"), ("movbe", "MOVBE"))


def _cpu_flags() -> set[str] | None:
    """The flags of /proc/cpuinfo's first processor, or None where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def _missing_baseline(flags: set[str] | None) -> list[str]:
    """The instruction sets of qkv's x86-64-v3 baseline that `flags` lack (none where unknown)."""
    if flags is None:
        return []
    return [name for flag, name in _BASELINE_FLAGS if flag not in flags]


def _load_core() -> Any:
    """qkv._core, after checking that this CPU can run it: loading it on a CPU without AVX2 would
    stop Python at an illegal instruction, with no message (the CLI checks the same: docs/faq.md)."""
    missing = _missing_baseline(_cpu_flags())
    if missing:
        raise ImportError(f"qkv needs a CPU with the x86-64-v3 instruction sets (AVX2 and FMA: Intel Haswell, "
                          f"AMD Zen and later); this one lacks {', '.join(missing)}. In a virtual machine, give "
                          f"it the host's CPU model (QEMU: -cpu host)")
    return importlib.import_module("qkv._core")


def __getattr__(name: str) -> Any:
    if name == "plot":
        return importlib.import_module("qkv.plot")
    if name in _PYTHON_NAMES:
        return getattr(importlib.import_module(_PYTHON_NAMES[name]), name)
    if name in _CORE_NAMES or name == "__version__":
        return getattr(_load_core(), name)
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
