"""Type stubs of qkv's compiled core (qkv._core); the docstrings are in the module itself."""
from typing import Any, Iterator, Optional, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

def set_num_threads(n: int) -> None: ...
def num_threads() -> int: ...
def kernels() -> str: ...
def import_hf(hf_dir: str, output_dir: str) -> dict[str, Any]: ...
def load_checkpoint(dir: str) -> Model: ...
def score(
    model: Model,
    tgt: Sequence[Sequence[int]],
    src: Optional[Sequence[Sequence[int]]] = None,
    batch_size: int = 32,
    quantize: Optional[str] = None,
    compute_type: Optional[str] = None,
) -> dict[str, Any]: ...

class Model:
    @property
    def architecture(self) -> str: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def num_parameters(self) -> int: ...
    @property
    def parameters(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def set_parameter(self, name: str, value: npt.ArrayLike) -> None: ...
    @property
    def compute_type(self) -> Optional[str]: ...
    def set_compute_type(self, compute_type: Optional[str]) -> None: ...
    def save(self, dir: str) -> None: ...
    def logits(
        self, input: npt.ArrayLike, src: Optional[npt.ArrayLike] = None
    ) -> npt.NDArray[np.float32]: ...

class Translation:
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def log_prob(self) -> float: ...
    @property
    def score(self) -> float: ...
    @property
    def attention(self) -> Optional[dict[str, list[npt.NDArray[np.float32]]]]: ...

class TranslationResult:
    @property
    def hypotheses(self) -> list[str]: ...
    @property
    def tokens(self) -> list[list[int]]: ...
    @property
    def scores(self) -> list[float]: ...
    @property
    def log_probs(self) -> list[float]: ...
    @property
    def attention(self) -> Optional[list[dict[str, list[npt.NDArray[np.float32]]]]]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Translation: ...
    def __iter__(self) -> Iterator[Translation]: ...

class Translator:
    def __init__(self, checkpoint: str, compute_type: str = "float32", device: str = "cpu") -> None: ...
    @property
    def compute_type(self) -> str: ...
    @property
    def device(self) -> str: ...
    def translate(
        self,
        texts: Sequence[str],
        beam_size: Optional[int] = None,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        batch_size: int = 32,
        truncate: bool = True,
        attention: bool = False,
        quantize: Optional[str] = None,
        source_lang: str = "",
        target_lang: str = "",
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        min_length: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> Union[list[str], list[list[Translation]]]: ...
    def translate_batch(
        self,
        texts: Sequence[str],
        beam_size: int = 4,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        max_batch_size: int = 32,
        truncate: bool = True,
        return_attention: bool = False,
    ) -> list[TranslationResult]: ...
    def translate_ids_batch(
        self,
        sources: Sequence[Sequence[int]],
        beam_size: int = 4,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        max_batch_size: int = 32,
    ) -> list[TranslationResult]: ...
    def source_pieces(self, text: str) -> list[str]: ...
    def target_pieces(self, tokens: Sequence[int], eos: bool = True) -> list[str]: ...
    def translate_ids(
        self,
        sources: Sequence[Sequence[int]],
        beam_size: Optional[int] = None,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        batch_size: int = 32,
        quantize: Optional[str] = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        min_length: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> Union[list[list[int]], list[list[Translation]]]: ...
    @property
    def model(self) -> Model: ...
    @property
    def has_tokenizers(self) -> bool: ...

class PieceStream(Iterator[str]):
    def __iter__(self) -> PieceStream: ...
    def __next__(self) -> str: ...

class Generation:
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def log_prob(self) -> float: ...
    @property
    def score(self) -> float: ...
    @property
    def finish_reason(self) -> str: ...

class GenerationResult:
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def finish_reason(self) -> str: ...
    @property
    def hypotheses(self) -> list[Generation]: ...

class Generator:
    def __init__(self, checkpoint: str, compute_type: str = "float32", device: str = "cpu") -> None: ...
    @property
    def compute_type(self) -> str: ...
    @property
    def device(self) -> str: ...
    @overload
    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
        batch_size: int = 32,
        stream: bool = False,
        quantize: Optional[str] = None,
        beam_size: int = 1,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        min_new_tokens: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> Union[str, list[Generation], PieceStream]: ...
    @overload
    def generate(
        self,
        prompt: Sequence[str],
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
        batch_size: int = 32,
        stream: bool = False,
        quantize: Optional[str] = None,
        beam_size: int = 1,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        min_new_tokens: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> Union[list[str], list[list[Generation]]]: ...
    def generate_batch(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
        max_batch_size: int = 32,
        beam_size: int = 1,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        min_new_tokens: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> list[GenerationResult]: ...
    def generate_tokens(
        self,
        prompt: str,
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
    ) -> PieceStream: ...
    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
        batch_size: int = 32,
        quantize: Optional[str] = None,
        beam_size: int = 1,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        min_new_tokens: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> Union[list[list[int]], list[list[Generation]]]: ...
    def generate_with_attention(
        self,
        prompt: str,
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        truncate_prompt: bool = False,
    ) -> dict[str, Any]: ...
    @property
    def model(self) -> Model: ...
    @property
    def vocab_size(self) -> int: ...

class ClassificationResult:
    @property
    def label(self) -> str: ...
    @property
    def probability(self) -> float: ...
    @property
    def top(self) -> list[tuple[str, float]]: ...

class Encoder:
    def __init__(
        self, checkpoint: str, max_input_length: int = 0, truncate: bool = True, compute_type: str = "float32",
        device: str = "cpu"
    ) -> None: ...
    @property
    def compute_type(self) -> str: ...
    @property
    def device(self) -> str: ...
    @overload
    def embed(self, texts: str, batch_size: int = 32) -> npt.NDArray[np.float32]: ...
    @overload
    def embed(self, texts: Sequence[str], batch_size: int = 32) -> npt.NDArray[np.float32]: ...
    def embed_ids(
        self, sentences: Sequence[Sequence[int]], batch_size: int = 32
    ) -> npt.NDArray[np.float32]: ...
    def classify(self, texts: Sequence[str], batch_size: int = 32) -> npt.NDArray[np.float32]: ...
    def classify_batch(
        self, texts: Sequence[str], top_k: int = 1, batch_size: int = 32
    ) -> list[ClassificationResult]: ...
    @property
    def labels(self) -> list[str]: ...
    @property
    def dim(self) -> int: ...
    @property
    def max_input_length(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...  # the older name of max_input_length
    @property
    def model(self) -> Model: ...

class Trainer:
    def __init__(self, **flags: Any) -> None: ...
    def fit(self, callback: Any = None, on_info: Any = None) -> dict[str, Any]: ...
    @property
    def last_checkpoint(self) -> str: ...
