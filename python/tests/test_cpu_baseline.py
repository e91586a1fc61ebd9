"""On a CPU without qkv's x86-64-v3 baseline (AVX2, FMA, ...), using the compiled part raises an
ImportError naming what the CPU lacks, where loading it would stop Python at an illegal instruction."""
from __future__ import annotations

import pytest

import qkv

NEHALEM = {"fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16"}
HASWELL = NEHALEM | {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"}


def test_a_cpu_below_the_baseline_is_named_not_loaded(monkeypatch):
    assert qkv._missing_baseline(HASWELL) == []
    assert qkv._missing_baseline(NEHALEM) == ["AVX", "AVX2", "FMA", "F16C", "BMI1", "BMI2", "LZCNT", "MOVBE"]
    assert qkv._missing_baseline(HASWELL - {"avx2"}) == ["AVX2"]
    assert qkv._missing_baseline(None) == []  # no /proc/cpuinfo: qkv._core's own loading decides
    monkeypatch.setattr(qkv, "_cpu_flags", lambda: NEHALEM)
    with pytest.raises(ImportError, match=r"this one lacks AVX, AVX2, FMA, F16C, BMI1, BMI2, LZCNT, MOVBE"):
        qkv.Translator  # noqa: B018 (the attribute loads qkv._core)
    with pytest.raises(ImportError, match=r"x86-64-v3"):
        qkv.Trainer(arch="decoder-only", text="unused.txt", output_dir="unused")


def test_this_machine_has_the_baseline():
    assert qkv._missing_baseline(qkv._cpu_flags()) == []
    assert qkv.Translator is not None
