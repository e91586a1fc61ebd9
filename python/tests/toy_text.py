"""Sentences made up from a small Bible-like vocabulary, for the tests' and the GPU check's small
models (python/tests/conftest.py, scripts/gpu_serve_check.py): no corpus needed."""
from __future__ import annotations

import random
from pathlib import Path

WORDS = ["the", "light", "was", "good", "and", "God", "divided", "waters", "from", "earth",
         "heaven", "day", "night", "said", "let", "there", "be", "made", "called", "morning"]
SPANISH = {"the": "la", "light": "luz", "was": "era", "good": "buena", "and": "y", "God": "Dios",
           "divided": "separó", "waters": "aguas", "from": "de", "earth": "tierra", "heaven": "cielo",
           "day": "día", "night": "noche", "said": "dijo", "let": "sea", "there": "allí", "be": "ser",
           "made": "hizo", "called": "llamó", "morning": "mañana"}


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + f" number {rng.randint(0, 999)} ."
            for _ in range(n)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
