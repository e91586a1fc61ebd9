#!/usr/bin/env python3
"""Reference data for qkv's T5 tokenizer (text/t5_tokenizer.h): transformers' slow T5Tokenizer over
a SentencePiece model trained here on a fixed English/German text; nothing is downloaded.

Usage: /usr/bin/python3 tests/python/make_t5_tokenizer_refs.py --out DIR

The model has T5's special layout: "<pad>" 0, "</s>" 1, "<unk>" 2, no "<s>"; a unigram model of
about 200 pieces without byte fallback (characters it never saw are "<unk>"), trained with one
thread (deterministic). The tokenizer is T5Tokenizer(vocab_file, extra_ids=10): "<extra_id_N>" is
id spm_size - 1 + 10 - N, legacy=True (the default), clean_up_tokenization_spaces left at its
default.

Writes (deterministic):
  DIR/hf_t5_tokenizer/          save_pretrained of the tokenizer (spiece.model, tokenizer_config.json,
                                special_tokens_map.json, added_tokens.json)
  DIR/hf_t5_tokenizer_refs.json
      transformers_version, spm_size, extra_ids, vocab_size (len(tokenizer)), clean_up (the
                                tokenizer's clean_up_tokenization_spaces)
      lines                     varied lines (spaces, punctuation, digits, accents, CJK, emoji, text
                                NFKC changes, special tokens written in the text, empty, tab)
      ids                       T5Tokenizer.from_pretrained(dir)(line).input_ids ("</s>" appended)
      decoded                   tokenizer.decode(ids, skip_special_tokens=True)
      decoded_other_clean_up    the same with clean_up_tokenization_spaces flipped
      extra_id_ids              convert_tokens_to_ids("<extra_id_N>") for N < extra_ids
      special_ids               convert_tokens_to_ids of "</s>", "<unk>", "<pad>"
      fast_ids, fast_decoded    what T5TokenizerFast.from_pretrained(dir) gives for the same lines
                                (reported by the C++ test where it differs from the slow tokenizer);
                                fast_error instead when it cannot be built (converting spiece.model
                                to tokenizer.json needs the protobuf package)
"""

import argparse
import json
import os
import sys
import tempfile
import warnings

try:
    import sentencepiece as spm
    import transformers
    from transformers import T5Tokenizer, T5TokenizerFast
    from transformers.utils import logging as hf_logging
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_t5_tokenizer_refs.py: {e}: install transformers and python3-sentencepiece with scripts/install_deps.sh")

EXTRA_IDS = 10
VOCAB = 200

TEXT = [
    "translate English to German: The house is wonderful.",
    "Das Haus ist wunderbar.",
    "translate English to German: The weather is nice today.",
    "Das Wetter ist heute schön.",
    "translate English to German: I would like a cup of coffee, please.",
    "Ich hätte gern eine Tasse Kaffee, bitte.",
    "translate English to German: Where is the train station?",
    "Wo ist der Bahnhof?",
    "translate English to German: We are going to the mountains in the summer.",
    "Wir fahren im Sommer in die Berge.",
    "translate English to German: My brother reads a book every week.",
    "Mein Bruder liest jede Woche ein Buch.",
    "translate English to German: The children play in the garden.",
    "Die Kinder spielen im Garten.",
    "translate English to German: It costs 12 euros and 50 cents.",
    "Es kostet 12 Euro und 50 Cent.",
    "translate English to German: Don't forget your umbrella!",
    "Vergiss deinen Regenschirm nicht!",
    "translate English to German: She's working at the hospital; he isn't.",
    "Sie arbeitet im Krankenhaus; er nicht.",
    "translate English to German: The old bridge crosses the river.",
    "Die alte Brücke überquert den Fluss.",
    "translate English to German: We've been waiting for three hours.",
    "Wir warten seit drei Stunden.",
    "summarize: The city council met on Monday and approved the new budget for schools.",
    "summarize: Heavy rain caused flooding in several villages near the coast.",
    "cola sentence: The book was read by the student.",
    "stsb sentence1: A man is playing a guitar. sentence2: A person plays music.",
    "question: What is the capital of Germany? context: Berlin is the capital of Germany.",
    "Grüße aus München, Köln und Düsseldorf.",
]

# The lines compared with transformers: whitespace, punctuation, digits, accents, characters the
# model never saw, text NFKC changes, and the special tokens written in the text with and without
# whitespace around them (extra ids strip it on both sides; "</s>" "<unk>" "<pad>" do not).
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
    "don't won't it's ... !? ; I'm we're they've ' quoted '",
    "word . , ! ? 're 've n't 's 'm",
    "Hello <extra_id_0>.",
    "Hello<extra_id_0>world",
    "The <extra_id_0> walks in <extra_id_1> park.",
    "  <extra_id_0>  ",
    "<extra_id_0>",
    "<extra_id_9> last sentinel",
    "<extra_id_10> is not a sentinel here",
    "<extra_id_0><extra_id_1> adjacent <extra_id_2>   <extra_id_3>",
    "text </s> more",
    "text</s>more",
    "ends with eos </s>",
    "ends with eos</s>",
    "</s>",
    "</s></s>",
    "<pad> and <unk> written, <s> is not special",
    "<extra_id_0></s><extra_id_1>",
    " </s> <extra_id_0> </s> ",
    "nbsp\u00a0<extra_id_0>\u3000ideographic\u2003em",
    "\x1c<extra_id_0>\x1fcontrol\x1e",
    "\u2581 literal underline \u2581\u2581",
    "<extra_id_0 unfinished <extra_ and </s",
    "Grüße aus München. Wir fahren im Sommer in die Berge!",
]


def train_spm(tmp):
    """spiece.model in `tmp`; trained there with relative paths, since the model records its
    input and prefix (absolute ones would make the bytes differ run to run)."""
    with open(os.path.join(tmp, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(TEXT) + "\n")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        spm.SentencePieceTrainer.train(input="train.txt", model_prefix="spiece", vocab_size=VOCAB, model_type="unigram",
                                       hard_vocab_limit=False, character_coverage=1.0, num_threads=1,
                                       pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>",
                                       unk_piece="<unk>", minloglevel=2)
    finally:
        os.chdir(cwd)
    return os.path.join(tmp, "spiece.model")


def fast_refs(out_dir):
    """The fast tokenizer's ids and decoded text, or why there is none (save_pretrained wrote no
    tokenizer.json: T5TokenizerFast converts spiece.model, which needs protobuf)."""
    try:
        fast = T5TokenizerFast.from_pretrained(out_dir)
    except ImportError as e:
        return {"fast_error": " ".join(str(e).split())[:200]}
    assert fast.is_fast
    ids = [fast(line).input_ids for line in LINES]
    return {"fast_ids": ids, "fast_decoded": [fast.decode(i, skip_special_tokens=True) for i in ids]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    hf_logging.set_verbosity_error()  # the legacy-behaviour notice
    warnings.filterwarnings("ignore", message="This sequence already has </s>")  # lines ending with "</s>"
    out_dir = os.path.join(args.out, "hf_t5_tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        T5Tokenizer(vocab_file=train_spm(tmp), extra_ids=EXTRA_IDS).save_pretrained(out_dir)
    slow = T5Tokenizer.from_pretrained(out_dir)  # as a user loads it
    assert not slow.is_fast
    ids = [slow(line).input_ids for line in LINES]
    clean_up = bool(slow.clean_up_tokenization_spaces)
    refs = {
        "transformers_version": transformers.__version__,
        "spm_size": slow.vocab_size, "extra_ids": EXTRA_IDS, "vocab_size": len(slow), "clean_up": clean_up,
        "lines": LINES, "ids": ids,
        "decoded": [slow.decode(i, skip_special_tokens=True) for i in ids],
        "decoded_other_clean_up": [slow.decode(i, skip_special_tokens=True, clean_up_tokenization_spaces=not clean_up)
                                   for i in ids],
        "extra_id_ids": [slow.convert_tokens_to_ids(f"<extra_id_{n}>") for n in range(EXTRA_IDS)],
        "special_ids": {t: slow.convert_tokens_to_ids(t) for t in ("</s>", "<unk>", "<pad>")},
    }
    refs.update(fast_refs(out_dir))
    with open(os.path.join(args.out, "hf_t5_tokenizer_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=False, indent=1)
    fast = (f"{sum(a != b for a, b in zip(ids, refs['fast_ids']))} tokenized differently by the fast tokenizer"
            if "fast_ids" in refs else f"no fast tokenizer: {refs['fast_error']}")
    print(f"make_t5_tokenizer_refs.py: transformers {transformers.__version__}, spm {slow.vocab_size} pieces + "
          f"{EXTRA_IDS} extra ids, {len(LINES)} lines ({fast}), wrote {out_dir}")


if __name__ == "__main__":
    main()
