#!/usr/bin/env python3
"""Reference data for tests/text/byte_level_bpe_test.cpp: GPT-2 style byte-level BPE by `tokenizers`.

Needs the `tokenizers` package (Hugging Face) in the interpreter CTest runs (QKV_PYTHON,
/usr/bin/python3); scripts/install_deps.sh installs it:
    /usr/bin/python3 -m pip install --break-system-packages "tokenizers>=0.19,<0.24"
This script installs nothing; it fails with that hint when tokenizers is missing.

Usage: make_bpe_refs.py --out DIR     (CTest runs this as a fixture before the C++ tests)

Trains a byte-level BPE (models.BPE + pre_tokenizers.ByteLevel + decoders.ByteLevel, vocabulary
2000, special token <|endoftext|>) on a training text and writes, deterministically:

  DIR/bpe/tokenizer.json          as `tokenizers` saves it (add_prefix_space false, like GPT-2)
  DIR/bpe/tokenizer_prefix.json   the same model with add_prefix_space true
  DIR/bpe/tokenizer_other_merges.json  the same as tokenizer.json with merges in the other form
                                  ("a b" strings if tokenizers wrote [["a","b"]] lists, or back)
  DIR/bpe/train.txt               the training text
  DIR/bpe/train_ids.txt           Tokenizer.encode(whole train.txt).ids, space-separated
  DIR/bpe/cases.json              {"tokenizers_version", "corpus", "corpus_lines", "merges_form",
                                   "other_merges_form", "cases": [{"name", "text", "ids", "ids_prefix"}, ...]}
      ids         Tokenizer.encode(text).ids with tokenizer.json
      ids_prefix  the same with tokenizer_prefix.json

The training text is the KJV Bible (Genesis..Deuteronomy, Psalms, Matthew..John: 12,092 verses)
when diatheke and the KJV module (Debian: diatheke sword-text-kjv) answer, otherwise a Bible-like
text of 6000 lines generated here from a fixed seed, with a warning on stderr; cases.json says which
("corpus": "kjv" or "generated", "corpus_lines"). With CI=true in the environment (CI runs
`CI=true bash .ci/run`) a missing KJV is an error naming what to install: CI never tests on the
smaller stand-in. The C++ test requires the full verse count when "corpus" is "kjv" and the KJV
itself under CI=true.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys

try:
    import tokenizers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:  # pragma: no cover
    sys.exit('make_bpe_refs.py needs tokenizers: /usr/bin/python3 -m pip install '
             '--break-system-packages "tokenizers>=0.19,<0.24"')

VOCAB_SIZE = 2000
SPECIAL = "<|endoftext|>"

# ------------------------------------------------------------------------------ training text --

KJV_MODULE = "engKJV2006eb"  # as scripts/prepare_bible_corpus.py reads it
KJV_BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Psalms",
             "Matthew", "Mark", "Luke", "John"]
VERSE_PREFIX = re.compile(r"^[1-3]?\s?[A-Za-z ]+ \d+:\d+: ")


KJV_VERSES = 12092  # the verses of KJV_BOOKS in engKJV2006eb (Debian's sword-text-kjv), counted 2026-11-26
KJV_INSTALL_HINT = "apt-get install diatheke sword-text-kjv (scripts/install_deps.sh installs both)"


def in_ci():
    """True under CI (the environment has CI=true): a missing input is then an error, never a fallback."""
    return os.environ.get("CI") == "true"


def kjv_lines():
    """Verse texts from diatheke's KJV module, or None when it is not installed or says nothing."""
    exe = shutil.which("diatheke")
    if not exe:
        return None
    lines = []
    for book in KJV_BOOKS:
        try:
            out = subprocess.run([exe, "-b", KJV_MODULE, "-f", "plain", "-k", book], capture_output=True,
                                 text=True, timeout=120, check=True).stdout
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
            return None
        for line in out.splitlines():
            if VERSE_PREFIX.match(line):
                text = VERSE_PREFIX.sub("", line).strip()
                if text:
                    lines.append(text)
    return lines if len(lines) > 1000 else None


def training_lines(script):
    """(lines, corpus): the KJV's verses and "kjv", or the generated stand-in and "generated" with a
    warning on stderr. Under CI=true a missing KJV exits with an error that names what to install."""
    lines = kjv_lines()
    if lines is not None:
        return lines, "kjv"
    missing = (f"{script}: the KJV text is missing (diatheke with the {KJV_MODULE} module answered nothing); "
               f"install it: {KJV_INSTALL_HINT}")
    if in_ci():
        sys.exit(f"{missing}. CI=true: the generated stand-in is not accepted in CI")
    lines = generated_lines()
    print(f"{missing}. Using a generated Bible-like text of {len(lines)} lines instead of {KJV_VERSES} verses",
          file=sys.stderr)
    return lines, "generated"


NAMES = "Moses Aaron Abraham Isaac Jacob Joseph David Solomon Israel Judah Egypt Jerusalem Pharaoh".split()
SUBJECTS = ["the LORD", "God", "the people", "the king", "the children of Israel", "the priest",
            "his servant", "the woman", "the elders", "all the congregation"]
VERBS = "said spake went came brought took gave made saw heard blessed called answered sent".split()
OBJECTS = ["unto them", "the land", "the city", "bread and wine", "the ark of the covenant",
           "the sheep and the oxen", "the word of the LORD", "his sons", "the gold and the silver",
           "the house of the LORD", "the waters", "a great multitude"]
TAILS = ["and it was so.", "for ever and ever.", "as he had commanded.", "in that day.",
         "saying, Thus saith the LORD;", "and they did eat.", "according to all that he had said:",
         "and there was evening and there was morning."]
MODERN = ["It's the people's house, isn't it?", "They're here; we've seen 'em, you'll see.",
          "I'm sure he'd know what's what.", "Don't! Won't! Can't!!", "She said: \"Yes...\"",
          "e-mail: moses@example.org -- (c) 2024", "Price: $1,234.56 (approx. 7%)",
          "café, naïve, façade, señor, über, Ελλάδα, Москва", "日本語のテキスト、中文文本。",
          "emoji 🙂👍🏽 and ★ stars ☆", "tabs\there\tand\tthere", "C++ & Rust <-> Python ==> ok?"]


def generated_lines(n=6000, seed=1611):
    """A varied, Bible-like English text with numbers, contractions, punctuation and non-ASCII."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        kind = rng.randrange(10)
        if kind < 6:
            verse = f"{rng.randrange(1, 51)}:{rng.randrange(1, 40)} " if rng.randrange(3) == 0 else ""
            line = (f"{verse}And {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}, "
                    f"and {rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}, {rng.choice(TAILS)}")
        elif kind < 8:
            line = (f"In the {rng.randrange(1, 1000)}th year of {rng.choice(NAMES)}, "
                    f"{rng.randrange(10, 100000)} men; {rng.choice(NAMES)}'s {rng.choice(['son', 'house', 'God'])} "
                    f"{rng.choice(VERBS)}!")
        else:
            line = rng.choice(MODERN)
        if rng.randrange(8) == 0:
            line = line.upper() if rng.randrange(2) else line.lower()
        lines.append(line)
    return lines


# --------------------------------------------------------------------------------- test lines --

HAND_CASES = [
    ("empty", ""),
    ("bible", "In the beginning God created the heaven and the earth."),
    ("bible2", "And God said, Let there be light: and there was light."),
    ("psalm", "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures:"),
    ("contractions", "It's the people's house; they're sure we've seen 'em. I'm, you'll, he'd, can't"),
    ("contractions_upper", "IT'S THEY'RE WE'VE I'M YOU'LL HE'D 'S 'T 'RE"),
    ("apostrophes", "'s 't 're 've 'm 'll 'd '' ''s x's 'sx"),
    ("numbers", "1 12 123 1234 12345 3.14159 1,000,000 2024-01-01 0x1F 7th 42nd"),
    ("punct_runs", "Wait!!! What?!?! ... --- (((nested))) [a] {b} <c> @#$%^&*_=+|\\/~`"),
    ("multi_space", "a  b   c    d     e"),
    ("leading_spaces", "   leading three"),
    ("trailing_spaces", "trailing three   "),
    ("only_spaces", "     "),
    ("single_space", " "),
    ("tabs", "col1\tcol2\t\tcol3\t \tend\t"),
    ("newlines", "line one\nline two\n\nline four\n"),
    ("crlf", "windows\r\nline\r\n"),
    ("mixed_ws", " \t \n  x \n\t y  \t"),
    ("accents", "café naïve façade señor über Ångström Æsir œuvre"),
    ("decomposed", "cafe\u0301 nai\u0308ve"),
    ("greek_cyrillic", "Ελλάδα Москва Україна"),
    ("cjk", "日本語のテキスト、中文文本。한국어"),
    ("emoji", "emoji 🙂👍🏽 family 👨‍👩‍👧 flag 🇩🇪 ★"),
    ("nbsp_and_unicode_spaces", "a\u00a0b\u2003c\u3000d\u2028e\u0085f \u00a0 g"),
    ("other_numbers", "² ½ Ⅻ ٣٤٥ ३ 一二三"),
    ("other_letters", "ª º ǅ ʰ ſ ẞ"),
    ("special_inside", "Hello<|endoftext|>world"),
    ("special_spaced", "end of text <|endoftext|> start again"),
    ("special_only", "<|endoftext|>"),
    ("special_twice", "<|endoftext|><|endoftext|>"),
    ("special_partial", "<|endoftext| <|endof <|endoftext|>|>"),
    ("special_newline", "one\n<|endoftext|>\ntwo"),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ababababababab"),
    ("control", "bell\x07 nul\x00 esc\x1b del\x7f"),
]

# Characters for random strings: what splits pre-tokens differently (letters, digits, marks,
# spaces of several kinds, apostrophes, punctuation, multi-byte characters).
RANDOM_POOL = list("aeiouxyzAEIOU0123456789'''''    \t\n\r.,!?-_\"()") + [
    "s", "t", "re", "ve", "ll", "d", "m", "é", "ß", "ñ", "\u0301", "\u00a0", "\u3000", "日", "本",
    "😀", "👍🏽", "½", "٣", "ª", "<|endoftext|>", "<|"]


def random_cases(n=300, seed=7):
    rng = random.Random(seed)
    return [(f"random_{i}", "".join(rng.choice(RANDOM_POOL) for _ in range(rng.randrange(1, 40))))
            for i in range(n)]


# ----------------------------------------------------------------------------------- training --

def train(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def with_prefix_space(tok_json):
    j = json.loads(tok_json)
    j["pre_tokenizer"]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(j, ensure_ascii=False))


def other_merges_form(tok_json):
    """The same tokenizer.json with merges written in the other of the two forms tokenizers reads."""
    j = json.loads(tok_json)
    merges = j["model"]["merges"]
    if merges and isinstance(merges[0], list):
        j["model"]["merges"] = [f"{a} {b}" for a, b in merges]
        form = "string"
    else:
        j["model"]["merges"] = [m.split(" ") for m in merges]
        form = "list"
    return json.dumps(j, ensure_ascii=False, indent=2), form


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = os.path.join(args.out, "bpe")
    os.makedirs(out, exist_ok=True)

    lines, corpus = training_lines("make_bpe_refs.py")
    tok = train(lines)
    tok_json = tok.to_str(pretty=True)
    prefix_tok = with_prefix_space(tok_json)
    other_json, other_form = other_merges_form(tok_json)
    # The other form must read back as the same tokenizer, or testing it would prove nothing.
    other_tok = Tokenizer.from_str(other_json)

    cases = list(HAND_CASES)
    cases += [(f"corpus_{i}", line) for i, line in enumerate(lines[:2000:4])]
    cases += [(f"corpus_chunk_{i}", "\n".join(lines[i:i + 25])) for i in range(0, 1000, 25)]
    cases += random_cases()
    records = []
    for name, text in cases:
        ids = tok.encode(text).ids
        if other_tok.encode(text).ids != ids:
            sys.exit(f"make_bpe_refs.py: the {other_form}-form merges encode {name!r} differently")
        records.append({"name": name, "text": text, "ids": ids, "ids_prefix": prefix_tok.encode(text).ids})

    write(os.path.join(out, "tokenizer.json"), tok_json)
    write(os.path.join(out, "tokenizer_prefix.json"), prefix_tok.to_str(pretty=True))
    write(os.path.join(out, "tokenizer_other_merges.json"), other_json)
    train_text = "\n".join(lines) + "\n"
    write(os.path.join(out, "train.txt"), train_text)
    write(os.path.join(out, "train_ids.txt"), " ".join(map(str, tok.encode(train_text).ids)) + "\n")
    merges = json.loads(tok_json)["model"]["merges"]
    meta = {"tokenizers_version": tokenizers.__version__, "corpus": corpus, "corpus_lines": len(lines),
            "merges_form": "list" if merges and isinstance(merges[0], list) else "string",
            "other_merges_form": other_form, "cases": records}
    write(os.path.join(out, "cases.json"), json.dumps(meta, ensure_ascii=False, indent=1) + "\n")
    print(f"make_bpe_refs.py: {len(records)} cases, vocabulary {tok.get_vocab_size()}, "
          f"corpus {corpus} ({len(lines)} lines), tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
