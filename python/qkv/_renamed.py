"""Names renamed to those of docs/cli.md (CTranslate2's and Hugging Face's where they have
settled): the old keyword still works for one release, with a DeprecationWarning naming the new
one. ``qkv._core`` calls :func:`install` once, when it is loaded; ``Trainer``'s renamed keywords are
handled in C++ (python/src/trainer.cpp), where its keywords are read. The keys of a translation's
attention weights are renamed the same way (:class:`AttentionWeights`).
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

_SEARCH = {"beam": "beam_size", "n_best": "num_hypotheses"}
_SAMPLING = {"sample": "do_sample"}

# (class, method) -> {old keyword: new keyword}; None as the class: a module function.
RENAMED: dict[tuple[str | None, str], dict[str, str]] = {
    ("Translator", "translate"): _SEARCH,
    ("Translator", "translate_ids"): _SEARCH,
    ("Generator", "generate"): _SAMPLING,
    ("Generator", "generate_ids"): _SAMPLING,
    ("Generator", "generate_with_attention"): _SAMPLING,
    ("Encoder", "__init__"): {"max_tokens": "max_input_length"},
    (None, "import_hf"): {"out_dir": "output_dir"},
}


# A translation's attention weights take the names of the .npz arrays `--attention-out` writes.
ATTENTION_KEYS = {"cross": "cross_attention", "decoder_self": "decoder_self_attention",
                  "encoder_self": "encoder_self_attention"}


class AttentionWeights(dict):  # type: ignore[type-arg]
    """``Translation.attention``: a plain dict of ``cross_attention``, ``decoder_self_attention`` and
    ``encoder_self_attention`` (a list of per-layer arrays each). Indexing it with an old key
    (``"cross"``, ``"decoder_self"``, ``"encoder_self"``) still works for one release, with a
    DeprecationWarning; ``in``, ``get`` and iteration know only the new keys.
    """

    def __missing__(self, key: Any) -> Any:
        new = ATTENTION_KEYS.get(key) if isinstance(key, str) else None
        if new is None or new not in self:
            raise KeyError(key)
        warnings.warn(f"attention[{key!r}] is deprecated; use attention[{new!r}]", DeprecationWarning, stacklevel=2)
        return self[new]


def _accepting_old_names(function: Callable[..., Any], qualname: str, renamed: dict[str, str]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for old, new in renamed.items():
            if old not in kwargs:
                continue
            if new in kwargs:
                raise TypeError(f"{qualname}() got both {old}= and {new}=; give {new}= only")
            warnings.warn(f"{qualname}({old}=) is deprecated; use {new}=", DeprecationWarning, stacklevel=2)
            kwargs[new] = kwargs.pop(old)
        return function(*args, **kwargs)

    return wrapper


def install(core: Any) -> None:
    """Wraps the methods of ``core`` (qkv._core) whose keywords were renamed."""
    for (class_name, name), renamed in RENAMED.items():
        owner = core if class_name is None else getattr(core, class_name)
        qualname = name if class_name is None else f"{class_name}.{name}"
        if class_name == "Encoder" and name == "__init__":
            qualname = "Encoder"
        setattr(owner, name, _accepting_old_names(getattr(owner, name), qualname, renamed))
