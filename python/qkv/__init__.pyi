from qkv import plot as plot
from qkv.training import Trainer as Trainer, TrainingArguments as TrainingArguments
from qkv._core import (
    ClassificationResult as ClassificationResult,
    Encoder as Encoder,
    Generation as Generation,
    GenerationResult as GenerationResult,
    Generator as Generator,
    Model as Model,
    Translation as Translation,
    TranslationResult as TranslationResult,
    Translator as Translator,
    __version__ as __version__,
    import_hf as import_hf,
    kernels as kernels,
    load_checkpoint as load_checkpoint,
    num_threads as num_threads,
    score as score,
    set_num_threads as set_num_threads,
)
