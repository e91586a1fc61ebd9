#!/usr/bin/env python3
"""transformers loads what `qkv export --to hf` writes for imported BART, mBART, M2M100 and NLLB
models, and computes the original models' numbers.

Usage: /usr/bin/python3 tests/python/check_bart_m2m100_export.py QKV_BIN REF_DIR bart|m2m100

bart:   REF_DIR/hf_bart (BART, with its byte-level BPE tokenizer.json), the same directory as
        transformers before 4.34 left it (the slow tokenizer's vocab.json and merges.txt, no
        tokenizer.json: qkv's import makes one) and REF_DIR/hf_mbart (mBART-50's layout, forced
        target-language code, no tokenizer), against hf_bart_refs.json (make_bart_refs.py);
m2m100: REF_DIR/hf_m2m100 (M2M100Tokenizer), REF_DIR/hf_nllb (NllbTokenizer) and REF_DIR/hf_mbart50
        (MBart50Tokenizer), against hf_m2m100_refs.json (make_m2m100_refs.py).

Each: `qkv import --from hf`, then `qkv export --to hf` of that checkpoint into a temporary directory;
the export's model_type is the original's, and the model class's from_pretrained loads it strictly
(no missing, unexpected or mismatched weights); every pair's log-probability within 1e-4 relative
of transformers' on the original, greedy generate's ids identical; the export has the tokenizer
files expected, and the tokenizer loaded from it (the original's class) encodes and decodes a few
texts as the one transformers loads from the original directory does. Then the comparison is
shown able to fail: a wrong tensor (decoder layer 0's self- and cross-attention v_proj swapped, as
a wrong name would place them), BART's position rows without their offset of 2, and scaled
embeddings left unscaled must each break the log-probabilities.
Prints "ok ..." on success.
"""

import json
import os
import shutil
import sys
import tempfile
from collections import namedtuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_checks import expect_greedy, expect_log_probs, import_then_export, load_strict, worst_log_prob_error  # noqa: E402

try:
    import transformers
    from transformers import (AutoTokenizer, BartForConditionalGeneration, M2M100ForConditionalGeneration,
                              MBartForConditionalGeneration)
    from transformers.models.m2m_100 import modeling_m2m_100
    from transformers.utils import logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"check_bart_m2m100_export.py: {e}: install transformers with scripts/install_deps.sh")

# M2M100's layers ask whether FSDP manages them, which imports torch.distributed.fsdp: Debian's torch
# cannot import it under Python 3.11 (as in make_m2m100_refs.py). Nothing here is sharded.
modeling_m2m_100.is_fsdp_managed_module = lambda module: False

# One model to check: its references (make_*_refs.py's file and key, which is also the directory's
# name), its class, the tokenizer files its export must have, whether its tokenizer is read with the
# slow class, and whether the directory is first made as transformers before 4.34 left it.
Spec = namedtuple("Spec", "refs_file refs_key cls exported_tokenizer_files slow before_4_34", defaults=(False,))
MODELS = {
    "bart": {
        "hf_bart": Spec("hf_bart_refs.json", "hf_bart", BartForConditionalGeneration,
                        ["tokenizer.json", "tokenizer_config.json"], False),
        # The slow tokenizer's vocab.json and merges.txt without tokenizer.json: qkv's import makes it.
        "hf_bart_before_4_34": Spec("hf_bart_refs.json", "hf_bart", BartForConditionalGeneration,
                                    ["tokenizer.json", "tokenizer_config.json"], False, True),
        "hf_mbart": Spec("hf_bart_refs.json", "hf_mbart", MBartForConditionalGeneration, [], False),
    },
    "m2m100": {
        "hf_m2m100": Spec("hf_m2m100_refs.json", "hf_m2m100", M2M100ForConditionalGeneration,
                          ["sentencepiece.bpe.model", "tokenizer_config.json", "vocab.json"], True),
        "hf_nllb": Spec("hf_m2m100_refs.json", "hf_nllb", M2M100ForConditionalGeneration,
                        ["sentencepiece.bpe.model", "tokenizer_config.json"], True),
        "hf_mbart50": Spec("hf_m2m100_refs.json", "hf_mbart50", MBartForConditionalGeneration,
                           ["sentencepiece.bpe.model", "tokenizer_config.json"], True),
    },
}
# What an export writes besides the tokenizer (manifest.json: qkv's all-or-nothing write).
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "manifest.json"}
TEXTS = ["The house is wonderful.", "Grüße aus München: 3 Tassen Kaffee!", "  two  spaces, </s> and <unk> ",
         "café naïve résumé 天地"]


def check_tokenizer(original, out, files, slow, name):
    """The export has the tokenizer files `files`, and the tokenizer loaded from it (the class
    tokenizer_config.json names; the slow one for the SentencePiece tokenizers) encodes and decodes
    TEXTS as the one transformers loads from the original directory does."""
    exported = sorted(set(os.listdir(out)) - MODEL_FILES)
    if exported != sorted(files):
        sys.exit(f"{name}: the export has tokenizer files {exported}, expected {sorted(files)}")
    if not files:
        return 0
    want = AutoTokenizer.from_pretrained(original, use_fast=not slow)
    got = AutoTokenizer.from_pretrained(out, use_fast=not slow)
    if type(got) is not type(want):
        sys.exit(f"{name}: the exported tokenizer loads as {type(got).__name__}, the original as {type(want).__name__}")
    for text in TEXTS:
        ids = want(text).input_ids
        if got(text).input_ids != ids:
            sys.exit(f"{name}: the exported tokenizer gives {got(text).input_ids} for {text!r}, the original {ids}")
        if got.decode(ids, skip_special_tokens=True) != want.decode(ids, skip_special_tokens=True):
            sys.exit(f"{name}: the exported tokenizer decodes {ids} otherwise than the original")
    return len(TEXTS)


def mutations(model):
    """(what, change, undo): changes of the loaded export that a wrong exporter would make."""
    out = []
    dec = model.model.decoder.layers[0]

    def swap_values():
        a, b = dec.self_attn.v_proj.weight, dec.encoder_attn.v_proj.weight
        a.data, b.data = b.data.clone(), a.data.clone()
    out.append(("decoder layer 0's self- and cross-attention v_proj swapped", swap_values, swap_values))
    positions = getattr(model.model.encoder.embed_positions, "weight", None)
    if isinstance(positions, torch.nn.Parameter):  # BART's learned table: rows of position p at p + 2
        saved = positions.data.clone()

        def no_offset():
            positions.data = torch.cat([saved[2:], saved[:2]])

        def restore():
            positions.data = saved.clone()
        out.append(("encoder position rows without the offset of 2", no_offset, restore))
    embed = model.model.encoder.embed_tokens
    if hasattr(embed, "embed_scale") and embed.embed_scale != 1.0:  # M2M100's scaled table
        scale = embed.embed_scale

        def unscaled():
            embed.embed_scale = 1.0

        def rescale():
            embed.embed_scale = scale
        out.append(("token embeddings not scaled (scale_embedding false)", unscaled, rescale))
    return out


def expect_mutations_detected(model, refs, name):
    """Each mutation must move a log-probability by more than the tolerance: the check can fail."""
    for what, change, undo in mutations(model):
        change()
        worst = worst_log_prob_error(model, refs["source_ids"], refs["target_ids"], refs["log_probs"])
        undo()
        if not worst > 1e-4:
            sys.exit(f"{name}: the check cannot fail: with {what} the worst relative error is still {worst:.3g}")
    return len(mutations(model))


def before_4_34(original, tmp):
    """A copy of `original` as transformers before 4.34 (or save_pretrained(legacy_format=True)) left
    it: no tokenizer.json, no added_tokens_decoder in tokenizer_config.json."""
    copy = os.path.join(tmp, os.path.basename(original) + "_before_4_34")
    shutil.copytree(original, copy)
    os.remove(os.path.join(copy, "tokenizer.json"))
    path = os.path.join(copy, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.pop("added_tokens_decoder", None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return copy


def check(qkv, refs_dir, name, spec, tmp):
    with open(os.path.join(refs_dir, spec.refs_file), encoding="utf-8") as f:
        all_refs = json.load(f)
    refs = all_refs[spec.refs_key]
    original = os.path.join(refs_dir, spec.refs_key)
    if spec.before_4_34:
        original = before_4_34(original, tmp)
    ckpt, out = os.path.join(tmp, name + "_ckpt"), os.path.join(tmp, name + "_hf")
    report = import_then_export(qkv, original, ckpt, out)
    if spec.cls.__name__ not in report:
        sys.exit(f"{name}: qkv export says {report.strip()!r}, expected it to name {spec.cls.__name__}")
    with open(os.path.join(original, "config.json"), encoding="utf-8") as f, \
            open(os.path.join(out, "config.json"), encoding="utf-8") as g:
        want_type, got_type = json.load(f)["model_type"], json.load(g)["model_type"]
    if got_type != want_type:
        sys.exit(f"{name}: the export's model_type is {got_type!r}, the original's {want_type!r}")
    model = load_strict(spec.cls, out, name)
    worst = expect_log_probs(model, refs["source_ids"], refs["target_ids"], refs["log_probs"], name)
    if "tgt_lang_id" in refs:  # make_m2m100_refs.py: texts in, the target language given to generate
        expect_greedy(model, refs["text_ids"], refs["greedy_ids"], all_refs["new_tokens"], name,
                      forced_bos_token_id=refs["tgt_lang_id"])
    else:  # make_bart_refs.py: mBART's forced language code comes from the generation config
        expect_greedy(model, refs["source_ids"], refs["greedy_ids"], all_refs["new_tokens"], name)
    texts = check_tokenizer(original, out, spec.exported_tokenizer_files, spec.slow, name)
    caught = expect_mutations_detected(model, refs, name)
    return f"{name} {worst:.3g} ({len(refs['greedy_ids'])} greedy, {texts} texts, {caught} breakages caught)"


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in MODELS:
        sys.exit(__doc__)
    qkv, refs_dir, family = sys.argv[1:]
    logging.set_verbosity_error()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = [check(qkv, refs_dir, name, spec, tmp) for name, spec in MODELS[family].items()]
    print(f"ok transformers {transformers.__version__} loads qkv's {family} exports; worst log-probability relative "
          "error " + ", ".join(results))


if __name__ == "__main__":
    main()
