"""``qkv.Trainer`` with typed arguments: ``TrainingArguments``, a dataclass of every ``qkv train``
flag (the keyword is the flag with underscores, docs/cli.md: ``--valid-every`` -> ``valid_every``),
as Hugging Face's ``TrainingArguments``.

A value of the wrong type or an unknown keyword is a ``TypeError`` naming the keyword, before
anything runs. ``None`` means "not given": the run takes qkv's default for its family (or, when
resuming, the saved run's setting). The library's own errors name the CLI flag (``--lr``); the
message then also names the keyword it means (``(Trainer keyword: lr=)``).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
import typing
import warnings
from typing import Any, Callable, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

# Keywords renamed with their flags (docs/cli.md): the old one still works, with a DeprecationWarning.
RENAMED = {"batch": "batch_size", "max_len": "max_seq_length", "max_tokens": "max_batch_tokens",
           "valid_beam": "valid_beam_size", "out": "output_dir"}


@dataclasses.dataclass
class TrainingArguments:
    """The flags of ``qkv train`` (``qkv train --help``, docs/cli.md), one field each."""

    # What to train on: parallel text (a translator), raw text (a GPT, or BERT's masked LM),
    # labelled text (a classifier), or synthetic ids.
    arch: Optional[str] = None  # encoder-decoder (default), decoder-only, encoder-only
    objective: Optional[str] = None  # encoder-only: mlm or classify
    src: Optional[PathLike] = None
    tgt: Optional[PathLike] = None
    tsv: Optional[PathLike] = None
    valid_src: Optional[PathLike] = None
    valid_tgt: Optional[PathLike] = None
    text: Optional[PathLike] = None
    valid_text: Optional[PathLike] = None
    labelled: Optional[PathLike] = None
    valid_labelled: Optional[PathLike] = None
    init: Optional[PathLike] = None
    synthetic: bool = False
    task: Optional[str] = None
    # The run.
    output_dir: Optional[PathLike] = None
    resume: Optional[PathLike] = None
    metrics: Optional[PathLike] = None
    save_every: Optional[int] = None
    log_every: Optional[int] = None
    valid_every: Optional[int] = None
    valid_bleu_sentences: Optional[int] = None
    valid_beam_size: Optional[int] = None
    keep_checkpoints: Optional[int] = None
    patience: Optional[int] = None
    steps: Optional[int] = None
    max_epochs: Optional[int] = None
    time_budget: Optional[str] = None
    seed: Optional[int] = None
    threads: Optional[int] = None
    # The model.
    preset: Optional[str] = None
    config: Optional[PathLike] = None
    vocab: Optional[int] = None
    d_model: Optional[int] = None
    heads: Optional[int] = None
    layers: Optional[int] = None
    d_ff: Optional[int] = None
    dropout: Optional[float] = None
    max_seq_length: Optional[int] = None
    share_all_embeddings: bool = False
    # Data.
    spm_vocab: Optional[int] = None
    spm_sample: Optional[int] = None
    too_long: Optional[str] = None
    max_batch_tokens: Optional[int] = None
    batch_size: Optional[int] = None
    block_size: Optional[int] = None
    len: Optional[int] = None
    # Optimisation.
    lr: Optional[float] = None
    schedule: Optional[str] = None
    warmup: Optional[int] = None
    clip_norm: Optional[float] = None
    label_smoothing: Optional[float] = None
    optimizer: Optional[str] = None
    weight_decay: Optional[float] = None
    precision: Optional[str] = None
    micro_batch: Optional[int] = None
    max_memory: Optional[str] = None
    recompute_ffn: bool = False

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            kind = _base_type(hints[field.name])
            if not _has_type(value, kind):
                raise TypeError(f"TrainingArguments: {field.name}={value!r} is not {_type_name(kind)}")
            if kind is float or kind == "path":
                setattr(self, field.name, float(value) if kind is float else os.fspath(value))

    def flags(self) -> dict[str, Any]:
        """The keywords qkv._core.Trainer takes: every field given (not None, booleans when true)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None and getattr(self, f.name) is not False}


def _base_type(hint: Any) -> Any:
    """int, float, str, bool, or "path" for an annotation such as Optional[int]."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if str in args and len(args) > 1:
        return "path"
    return args[0]


def _has_type(value: Any, kind: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "path":
        return isinstance(value, (str, os.PathLike))
    return isinstance(value, kind)


def _type_name(kind: Any) -> str:
    return {"path": "a str or path", int: "an int", float: "a number", str: "a str", bool: "a bool"}[kind]


FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingArguments))


def _current_keywords(keywords: dict[str, Any]) -> dict[str, Any]:
    """`keywords` with renamed ones under their new names (warning), unknown ones a TypeError."""
    current: dict[str, Any] = {}
    for name, value in keywords.items():
        if name in RENAMED:
            new = RENAMED[name]
            warnings.warn(f"Trainer({name}=) is deprecated; use {new}=", DeprecationWarning, stacklevel=3)
            if new in keywords:
                raise TypeError(f"Trainer() got both {name}= and {new}=; give {new}= only")
            name = new
        elif name not in FIELDS:
            near = difflib.get_close_matches(name, sorted(FIELDS), n=1)
            hint = f" (did you mean {near[0]}=?)" if near else ""
            raise TypeError(f"Trainer() got an unexpected keyword argument '{name}'{hint}")
        current[name] = value
    return current


def _naming_keywords(error: Exception) -> Exception:
    """`error` again, its message followed by the Trainer keywords of the CLI flags it names."""
    message = str(error)
    named = []
    for flag in re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", message):
        keyword = flag.replace("-", "_")
        keyword = RENAMED.get(keyword, keyword)
        if keyword in FIELDS and keyword not in named:
            named.append(keyword)
    if not named:
        return error
    which = "keyword" if len(named) == 1 else "keywords"
    try:
        return type(error)(f"{message} (Trainer {which}: {', '.join(k + '=' for k in named)})")
    except TypeError:  # an exception type that takes other arguments
        return error


class Trainer:
    """A training run as ``qkv train`` describes it: ``Trainer(TrainingArguments(...))`` or
    ``Trainer(arch="decoder-only", text=..., output_dir=..., steps=...)`` (keywords override the
    arguments' fields). ``fit()`` trains; see its help."""

    def __init__(self, args: Optional[TrainingArguments] = None, /, **keywords: Any) -> None:
        from qkv import _load_core

        _core = _load_core()
        if args is not None and not isinstance(args, TrainingArguments):
            raise TypeError(f"Trainer(args): expected a TrainingArguments, got {type(args).__name__}")
        current = _current_keywords(keywords)
        self.args = dataclasses.replace(args, **current) if args is not None else TrainingArguments(**current)
        try:
            self._trainer = _core.Trainer(**self.args.flags())
        except (ValueError, TypeError, FileNotFoundError) as e:
            raise _naming_keywords(e) from None

    def fit(self, callback: Optional[Callable[[dict[str, Any]], Any]] = None,
            on_info: Optional[Callable[[str], Any]] = None) -> dict[str, Any]:
        """Trains. callback(metrics: dict) hears every progress report ({'event': 'step', 'step', 'epoch',
        'loss', 'lr', 'grad_norm', 'tokens_per_second', 'time', ...}) and validation ({'event': 'validation',
        'loss', 'perplexity', 'bleu'/'accuracy'/'macro_f1' when computed, a classifier's 'labels' and
        'confusion' (dev counts, rows gold, columns predicted), 'best'}); an exception in it stops
        training (the last checkpoint is saved) and is re-raised. Ctrl-C saves the last checkpoint and raises
        KeyboardInterrupt. Returns {'step', 'elapsed', 'stop_reason', 'interrupted', 'last_checkpoint'}. qkv's
        errors name the CLI flag and the Trainer keyword."""
        try:
            return self._trainer.fit(callback=callback, on_info=on_info)
        except (ValueError, FileNotFoundError) as e:
            raise _naming_keywords(e) from None

    @property
    def last_checkpoint(self) -> str:
        """Where the run keeps its last checkpoint (OUTPUT_DIR/last for text runs)."""
        return self._trainer.last_checkpoint
