#!/usr/bin/env python3
"""Reference data for `qkv import --from hf` of M2M100 / NLLB-200 models and for the multilingual
tokenizers (text/multilingual_tokenizer.h): models and tokenizers that `transformers` builds itself
(nothing is downloaded). A SentencePiece BPE model of 300 pieces, trained here (one thread,
deterministic) on make_t5_tokenizer_refs.TEXT with fairseq's ids (<unk> 0, <s> 1, </s> 2, no pad),
stands in for sentencepiece.bpe.model; the tokenizers are built from it and saved with
save_pretrained:

  hf_m2m100      M2M100ForConditionalGeneration (model_type m2m_100) with an M2M100Tokenizer:
                 vocab.json (<s> <pad> </s> <unk>, then the pieces) and the 100 language tokens
                 "__en__" as additional special tokens (as the released tokenizers list them)
  hf_nllb        M2M100ForConditionalGeneration with an NllbTokenizer (fairseq offset 1, codes such
                 as eng_Latn; legacy_behaviour false, the current default: source = code X </s>)
  hf_mbart50     MBartForConditionalGeneration (mBART-50's pre-LN layout) with an MBart50Tokenizer,
                 forced_bos_token_id de_DE in its config
  tok_mbart      MBartTokenizer (mbart-large-cc25's: source = X </s> en_XX), tokenizer only
  tok_nllb_legacy  NllbTokenizer with legacy_behaviour true (source = X </s> eng_Latn), tokenizer only

The models: d_model 64, 4 heads, ffn 96, 2 + 2 layers, 64 positions, the tokenizer's vocabulary
(M2M100 / NLLB: ReLU, scale_embedding true, pad 1, EOS 2 = decoder start; no forced_bos_token_id in
the config, as the released ones: the target language is given to generate), random weights
(torch.manual_seed), then 150 Adam steps on English -> German pairs of TEXT written as the
tokenizer does (source en X </s>, labels de X </s>), so that outputs are varied and end with EOS.

Usage: /usr/bin/python3 tests/python/make_m2m100_refs.py --out DIR

Writes DIR/<name>/ and DIR/hf_m2m100_refs.json:
  new_tokens, transformers_version
  <model>.src_lang, .tgt_lang      language codes as the tokenizer names them; .tgt_lang_id its id
  <model>.source_ids, .target_ids  tokenizer(src, text_target=tgt) of the pairs
  <model>.log_probs      per pair, the sum over target_ids of log p, teacher forced from the decoder
                         start (model(input_ids, labels=target_ids))
  <model>.texts          English lines (trained on and not); .text_ids: tokenizer(text).input_ids
  <model>.greedy_ids     generate(num_beams=1, forced_bos_token_id=tgt_lang_id, max_new_tokens):
                         the ids after the decoder start, each ending with EOS before the limit;
                         .greedy_text: tokenizer.decode(ids, skip_special_tokens=True)
  <model>.beam_ids       generate(num_beams=4, early_stopping=True, length_penalty=0.0), as qkv's
                         beam search stops (a sentence is done once 4 hypotheses have ended) and
                         ranks (sum of log-probabilities); .beam_text decoded
  <model>.min_top2_margin  smallest top-1 minus top-2 score over the greedy steps (> 1e-3)
  <tokenizer>.lines, .ids, .decoded   tokenizer(line).input_ids and decode(ids,
                         skip_special_tokens=True) of varied lines; .other_lang, .other_ids: the
                         same lines with another source language; .vocab_size len(tokenizer);
                         .lang_ids {code: id} for a few codes; .fast_ids, .fast_decoded: what the fast
                         class (NllbTokenizerFast, MBart50TokenizerFast, MBartTokenizerFast; M2M100 has none)
                         loaded from the same directory gives, or .fast_error when it cannot be built
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_t5_tokenizer_refs import TEXT  # noqa: E402
from seq2seq_refs import log_probs  # noqa: E402

try:
    import sentencepiece as spm
    import transformers
    from transformers import (M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer, MBart50Tokenizer,
                              MBart50TokenizerFast, MBartConfig, MBartForConditionalGeneration, MBartTokenizer,
                              MBartTokenizerFast, NllbTokenizer, NllbTokenizerFast)
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES
    from transformers.utils import logging as hf_logging
    from transformers.models.m2m_100 import modeling_m2m_100
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_m2m100_refs.py: {e}: install transformers and python3-sentencepiece with scripts/install_deps.sh")

# M2M100's layers ask whether FSDP manages them, which imports torch.distributed.fsdp: Debian's torch
# cannot import it under Python 3.11 (a dataclass with a mutable default). Nothing here is sharded.
modeling_m2m_100.is_fsdp_managed_module = lambda module: False

PAD, EOS = 1, 2
NEW_TOKENS = 40
TRAIN_STEPS = 150

# Varied lines for the tokenizers: spaces, punctuation, digits, accents, characters the model never
# saw, text NFKC changes, and special tokens and language codes written in the text.
LINES = [
    "translate English to German: The house is wonderful.",
    "Das Haus ist wunderbar.",
    "  leading and   repeated   spaces  ",
    "numbers 12345 and 3.14, (brackets) [x] {y} \"quotes\" 'single'",
    "Ünïcödé àccents ñ ç ß and CJK 天地 and emoji 🙂",
    "ﬁ ligature and full-width ＡＢＣ ① ㎏",
    "tab\tinside\tand\nnewline",
    "",
    "a",
    " ",
    "don't won't it's ... !? ; I'm we're they've",
    "text </s> more",
    "ends with eos</s>",
    "<pad> and <unk> written, <s> too",
    "a <mask> in the middle",
    "before<mask>after",
    "__de__ Hallo and __fr__ inside",
    "deu_Latn Hallo and fra_Latn inside",
    "de_DE Hallo and fr_XX inside",
    "\u2581 literal underline \u2581\u2581",
    "Grüße aus München. Wir fahren im Sommer in die Berge!",
]


def train_spm(tmp):
    """sentencepiece.bpe.model in `tmp` (relative paths: the model records its input)."""
    with open(os.path.join(tmp, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(TEXT) + "\n")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        spm.SentencePieceTrainer.train(input="train.txt", model_prefix="sentencepiece.bpe", vocab_size=300,
                                       model_type="bpe", character_coverage=1.0, num_threads=1, minloglevel=2)
    finally:
        os.chdir(cwd)
    return os.path.join(tmp, "sentencepiece.bpe.model")


def m2m100_vocab(spm_path, path):
    """vocab.json as M2M100's: fairseq's four specials, then every other piece."""
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(len(sp)):
        if sp.id_to_piece(i) not in vocab:
            vocab[sp.id_to_piece(i)] = len(vocab)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)


def make_tokenizers(spm_path, tmp, out):
    """Each tokenizer saved into out/<name> and loaded back from there, as a user's would be."""
    m2m_vocab = os.path.join(tmp, "vocab.json")
    m2m100_vocab(spm_path, m2m_vocab)
    lang_tokens = [f"__{c}__" for c in FAIRSEQ_LANGUAGE_CODES["m2m100"]]
    made = {
        "hf_m2m100": (M2M100Tokenizer, dict(vocab_file=m2m_vocab, spm_file=spm_path, src_lang="en", tgt_lang="de",
                                            additional_special_tokens=lang_tokens)),
        "hf_nllb": (NllbTokenizer, dict(vocab_file=spm_path, src_lang="eng_Latn", tgt_lang="deu_Latn")),
        "hf_mbart50": (MBart50Tokenizer, dict(vocab_file=spm_path, src_lang="en_XX", tgt_lang="de_DE")),
        "tok_mbart": (MBartTokenizer, dict(vocab_file=spm_path, src_lang="en_XX", tgt_lang="de_DE")),
        "tok_nllb_legacy": (NllbTokenizer, dict(vocab_file=spm_path, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                                legacy_behaviour=True)),
    }
    tokenizers = {}
    for name, (cls, kwargs) in made.items():
        directory = os.path.join(out, name)
        os.makedirs(directory, exist_ok=True)
        cls(**kwargs).save_pretrained(directory)
        tokenizers[name] = cls.from_pretrained(directory)
    return tokenizers


OTHER_LANG = {"hf_m2m100": "fr", "hf_nllb": "fra_Latn", "hf_mbart50": "fr_XX", "tok_mbart": "fr_XX",
              "tok_nllb_legacy": "fra_Latn"}


def tokenizer_refs(tokenizer, name):
    out = {"lines": LINES, "ids": [], "decoded": [], "other_lang": OTHER_LANG[name], "other_ids": [],
           "vocab_size": len(tokenizer), "src_lang": tokenizer.src_lang}
    for line in LINES:
        ids = tokenizer(line).input_ids
        out["ids"].append(ids)
        out["decoded"].append(tokenizer.decode(ids, skip_special_tokens=True))
    default = tokenizer.src_lang
    tokenizer.src_lang = OTHER_LANG[name]
    out["other_ids"] = [tokenizer(line).input_ids for line in LINES]
    tokenizer.src_lang = default
    codes = {"hf_m2m100": ["en", "de", "fr", "zu"], "tok_mbart": ["en_XX", "de_DE", "fr_XX"]}.get(
        name, ["eng_Latn", "deu_Latn", "fra_Latn"] if "nllb" in name else ["en_XX", "de_DE", "fr_XX"])
    out["lang_ids"] = {c: tokenizer.get_lang_id(c) if name == "hf_m2m100" else tokenizer.convert_tokens_to_ids(c)
                       for c in codes}
    return out


FAST = {"hf_nllb": NllbTokenizerFast, "hf_mbart50": MBart50TokenizerFast, "tok_mbart": MBartTokenizerFast,
        "tok_nllb_legacy": NllbTokenizerFast}


def fast_refs(name, directory):
    """What AutoTokenizer would load by default (the fast class, converted from the SentencePiece
    model): its ids and decoded text for LINES, for comparison with the slow class qkv follows."""
    try:
        fast = FAST[name].from_pretrained(directory)
    except Exception as e:  # converting needs the protobuf package
        return {"fast_error": f"{type(e).__name__}: {e}"}
    ids = [fast(line).input_ids for line in LINES]
    return {"fast_ids": ids, "fast_decoded": [fast.decode(i, skip_special_tokens=True) for i in ids]}


def train(model, tokenizer, pairs, seed):
    batch = tokenizer([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == PAD, -100)
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
        optimizer.step()
    model.eval()


def make_model(name, vocab, seed, forced_bos):
    sizes = dict(vocab_size=vocab, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64,
                 dropout=0.1, pad_token_id=PAD, bos_token_id=0, eos_token_id=EOS, decoder_start_token_id=EOS)
    torch.manual_seed(seed)
    if name == "hf_mbart50":
        return MBartForConditionalGeneration(MBartConfig(scale_embedding=True, activation_function="gelu",
                                                         forced_bos_token_id=forced_bos, forced_eos_token_id=EOS,
                                                         **sizes))
    return M2M100ForConditionalGeneration(M2M100Config(scale_embedding=True, activation_function="relu", **sizes))


def generate(model, source, forced, beams):
    """generate's ids after the decoder start, and the smallest top-1 minus top-2 score over its
    steps but the last (greedy only)."""
    out = model.generate(torch.tensor([source]), num_beams=beams, do_sample=False, max_new_tokens=NEW_TOKENS,
                         forced_bos_token_id=forced, early_stopping=True, length_penalty=0.0, synced_gpus=False,
                         output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[0, 1:].tolist()
    if beams > 1:
        return ids, float("inf")
    steps = out.scores[1:-1]  # the first step is forced
    margin = min((float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in steps), default=float("inf"))
    return ids, margin


def usable(ids, tokenizer):
    """An output that ended with EOS before the limit, without a pad id (qkv's search never writes
    one), and decodes to valid UTF-8."""
    return ids[-1] == EOS and len(ids) < NEW_TOKENS and PAD not in ids and \
        "\ufffd" not in tokenizer.decode(ids, skip_special_tokens=True)


def model_refs(name, tokenizer, out_dir, seed):
    pairs = [(TEXT[i], TEXT[i + 1]) for i in range(0, 24, 2)]  # English -> German
    forced = tokenizer.get_lang_id("de") if name == "hf_m2m100" else tokenizer.convert_tokens_to_ids(tokenizer.tgt_lang)
    model = make_model(name, len(tokenizer), seed, forced)
    train(model, tokenizer, pairs, seed + 1)
    model.save_pretrained(os.path.join(out_dir, name), safe_serialization=True)
    test_pairs = pairs[:6] + [(TEXT[24 + i], TEXT[i * 2 + 1]) for i in range(3)]
    batch = tokenizer([s for s, _ in test_pairs], text_target=[t for _, t in test_pairs])
    refs = {"src_lang": tokenizer.src_lang, "tgt_lang": "de" if name == "hf_m2m100" else tokenizer.tgt_lang,
            "tgt_lang_id": forced, "source_ids": batch["input_ids"], "target_ids": batch["labels"],
            "log_probs": log_probs(model, batch["input_ids"], batch["labels"]),
            "texts": [], "text_ids": [], "greedy_ids": [], "greedy_text": [], "beam_ids": [], "beam_text": []}
    margins = []
    with torch.no_grad():
        for text in [s for s, _ in pairs] + TEXT[24:]:
            source = tokenizer(text).input_ids
            greedy_ids, margin = generate(model, source, forced, 1)
            beam_ids, _ = generate(model, source, forced, 4)
            if not usable(greedy_ids, tokenizer) or not usable(beam_ids, tokenizer):
                continue
            margins.append(margin)
            refs["texts"].append(text)
            refs["text_ids"].append(source)
            refs["greedy_ids"].append(greedy_ids)
            refs["greedy_text"].append(tokenizer.decode(greedy_ids, skip_special_tokens=True))
            refs["beam_ids"].append(beam_ids)
            refs["beam_text"].append(tokenizer.decode(beam_ids, skip_special_tokens=True))
    refs["min_top2_margin"] = min(margins)
    assert len(refs["texts"]) >= 6 and refs["min_top2_margin"] > 1e-3, (name, len(refs["texts"]), margins)
    return refs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    refs = {"transformers_version": transformers.__version__, "new_tokens": NEW_TOKENS}
    with tempfile.TemporaryDirectory() as tmp:
        spm_path = train_spm(tmp)
        for name in ("hf_m2m100", "hf_nllb", "hf_mbart50", "tok_mbart", "tok_nllb_legacy"):
            shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
        tokenizers = make_tokenizers(spm_path, tmp, args.out)
    for name, tokenizer in tokenizers.items():
        refs[name] = tokenizer_refs(tokenizer, name)
        if name in FAST:
            refs[name].update(fast_refs(name, os.path.join(args.out, name)))
    for name, seed in (("hf_m2m100", 90), ("hf_nllb", 100), ("hf_mbart50", 110)):
        refs[name].update(model_refs(name, tokenizers[name], args.out, seed))
    with open(os.path.join(args.out, "hf_m2m100_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, indent=1, ensure_ascii=False)
    print("make_m2m100_refs.py: transformers " + transformers.__version__ + ", " + ", ".join(
        f"{n}: {len(refs[n]['texts'])} texts, greedy lengths {[len(g) for g in refs[n]['greedy_ids']]}"
        for n in ("hf_m2m100", "hf_nllb", "hf_mbart50")))


if __name__ == "__main__":
    main()
