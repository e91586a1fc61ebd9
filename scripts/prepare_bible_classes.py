#!/usr/bin/env python3
"""Label the English (KJV) verses of the Bible corpus by the group of their book.

Usage:
    python3 scripts/prepare_bible_classes.py --corpus DIR --out DIR2

DIR is the output of scripts/prepare_bible_corpus.py (built there first when
DIR/train.en is missing; that needs diatheke and the SWORD modules).  Only the
verses that script writes are used, so Matthew, Luke and Romans never appear.
Standard library only.  Unit tests:
    python3 -m unittest tests/python/test_prepare_bible_classes.py

Classes (the traditional groups of the Christian canon):
    law         Genesis .. Deuteronomy
    history     Joshua .. Esther
    wisdom      Job, Psalms, Proverbs, Ecclesiastes, Song of Solomon
    prophets    Isaiah .. Malachi (Lamentations and Daniel included)
    gospels     Mark, John
    epistles    Acts and the letters, Hebrews .. Jude included
    apocalypse  Revelation

Split by chapter, so that verses of one chapter never straddle two splits and
every class is in every split: chapter number divisible by 10 -> test, ending
in 5 -> dev, the rest -> train (Revelation: test 10, 20; dev 5, 15).

Writes DIR2/{train,dev,test}.tsv ("label<TAB>verse" lines, in canonical
order), DIR2/{train,dev,test}.ids ("OSISBOOK CHAPTER:VERSE" for each line) and
DIR2/{train,dev}.txt (the verses alone, for masked-LM pretraining and its
validation: the test chapters are never seen before evaluation).
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_bible_corpus as pbc  # noqa: E402

GROUPS = collections.OrderedDict([
    ("law", ["Gen", "Exod", "Lev", "Num", "Deut"]),
    ("history", ["Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Ezra", "Neh", "Esth"]),
    ("wisdom", ["Job", "Ps", "Prov", "Eccl", "Song"]),
    ("prophets", ["Isa", "Jer", "Lam", "Ezek", "Dan", "Hos", "Joel", "Amos", "Obad", "Jonah", "Mic", "Nah", "Hab",
                  "Zeph", "Hag", "Zech", "Mal"]),
    ("gospels", ["Matt", "Mark", "Luke", "John"]),
    ("epistles", ["Acts", "Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim",
                  "Titus", "Phlm", "Heb", "Jas", "1Pet", "2Pet", "1John", "2John", "3John", "Jude"]),
    ("apocalypse", ["Rev"]),
])
GROUP_OF = {osis: group for group, books in GROUPS.items() for osis in books}
SPLITS = ("train", "dev", "test")


def group_of(osis):
    """The class of a book (its OSIS id), e.g. "Ps" -> "wisdom"."""
    if osis not in GROUP_OF:
        raise ValueError("unknown book %r" % osis)
    return GROUP_OF[osis]


def split_of_chapter(chapter):
    """test for chapters divisible by 10, dev for those ending in 5, train otherwise."""
    if chapter < 1:
        raise ValueError("chapter %d < 1" % chapter)
    if chapter % 10 == 0:
        return "test"
    if chapter % 10 == 5:
        return "dev"
    return "train"


def parse_ref(ref):
    """"1Sam 3:4" -> ("1Sam", 3, 4)."""
    book, _, cv = ref.strip().rpartition(" ")
    chapter, _, verse = cv.partition(":")
    if not book or not chapter.isdigit() or not verse.isdigit():
        raise ValueError("bad verse reference %r" % ref)
    return book, int(chapter), int(verse)


def label_verses(refs, texts):
    """{split: [(label, ref, text)]} for parallel lists of references and verse texts."""
    if len(refs) != len(texts):
        raise ValueError("%d references but %d verses" % (len(refs), len(texts)))
    out = {s: [] for s in SPLITS}
    for ref, text in zip(refs, texts):
        book, chapter, _ = parse_ref(ref)
        if book in pbc.RESERVED_BOOKS:
            raise ValueError("%s: a reserved book in the corpus" % ref)
        if "\t" in text or not text.strip():
            raise ValueError("%s: empty verse or a tab in it" % ref)
        out[split_of_chapter(chapter)].append((group_of(book), ref, text))
    return out


def canonical_key(item):
    book, chapter, verse = parse_ref(item[1])
    return (pbc.BOOK_INDEX[book], chapter, verse)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def read_corpus(corpus):
    refs, texts = [], []
    for split in pbc.SPLITS:
        refs += read_lines(os.path.join(corpus, split + ".ids"))
        texts += read_lines(os.path.join(corpus, split + ".en"))
    return refs, texts


def write_lines(path, lines):
    pbc.atomic_write(path, "".join(line + "\n" for line in lines).encode("utf-8"))


def write_classes(out_dir, by_split):
    os.makedirs(out_dir, exist_ok=True)
    for split in SPLITS:
        items = sorted(by_split[split], key=canonical_key)
        write_lines(os.path.join(out_dir, split + ".tsv"), ("%s\t%s" % (l, t) for l, _, t in items))
        write_lines(os.path.join(out_dir, split + ".ids"), (r for _, r, _ in items))
        if split != "test":
            write_lines(os.path.join(out_dir, split + ".txt"), (t for _, _, t in items))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="output of prepare_bible_corpus.py (built when missing)")
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.corpus, "train.en")):
        code = pbc.main(["--out", args.corpus])
        if code:
            return code
    by_split = label_verses(*read_corpus(args.corpus))
    write_classes(args.out, by_split)
    for split in SPLITS:
        counts = collections.Counter(l for l, _, _ in by_split[split])
        print("%-5s %6d verses: %s" % (split, len(by_split[split]),
                                       ", ".join("%s %d" % (g, counts[g]) for g in GROUPS)))
    missing = [(s, g) for s in SPLITS for g in GROUPS if not any(l == g for l, _, _ in by_split[s])]
    if missing:
        print("error: classes missing from splits: %s" % missing, file=sys.stderr)
        return 1
    print("wrote %s/{train,dev,test}.{tsv,ids} and {train,dev}.txt" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
