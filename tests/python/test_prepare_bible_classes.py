"""Unit tests of scripts/prepare_bible_classes.py: the classes, the chapter split rule and the
writing of the labelled files (pure functions; diatheke not needed).

    python3 -m unittest tests/python/test_prepare_bible_classes.py
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

import prepare_bible_classes as pbcl  # noqa: E402
import prepare_bible_corpus as pbc  # noqa: E402


class SplitRule(unittest.TestCase):
    def test_tens_are_test_fives_are_dev_the_rest_train(self):
        self.assertEqual(pbcl.split_of_chapter(10), "test")
        self.assertEqual(pbcl.split_of_chapter(150), "test")
        self.assertEqual(pbcl.split_of_chapter(5), "dev")
        self.assertEqual(pbcl.split_of_chapter(25), "dev")
        self.assertEqual(pbcl.split_of_chapter(115), "dev")
        for c in (1, 2, 4, 6, 9, 11, 14, 16, 19, 21, 119):
            self.assertEqual(pbcl.split_of_chapter(c), "train", c)
        self.assertRaises(ValueError, pbcl.split_of_chapter, 0)

    def test_shares_over_the_first_hundred_chapters(self):
        splits = [pbcl.split_of_chapter(c) for c in range(1, 101)]
        self.assertEqual((splits.count("train"), splits.count("dev"), splits.count("test")), (80, 10, 10))

    def test_every_class_has_chapters_in_every_split(self):
        # Revelation (22 chapters) and the gospels kept (Mark 16, John 21) are the smallest classes;
        # every other class has a book of at least 20 chapters.
        self.assertEqual({pbcl.split_of_chapter(c) for c in range(1, 23)}, set(pbcl.SPLITS))
        self.assertEqual({pbcl.split_of_chapter(c) for c in range(1, 17)}, {"train", "dev", "test"})


class Classes(unittest.TestCase):
    def test_every_book_of_the_corpus_script_has_one_class(self):
        for osis, _, _ in pbc.BOOKS:
            self.assertIn(pbcl.group_of(osis), pbcl.GROUPS)
        self.assertEqual(len(pbcl.GROUP_OF), len(pbc.BOOKS))
        self.assertEqual(pbcl.group_of("Ps"), "wisdom")
        self.assertEqual(pbcl.group_of("Acts"), "epistles")
        self.assertEqual(pbcl.group_of("Lam"), "prophets")
        self.assertEqual(pbcl.group_of("Rev"), "apocalypse")
        self.assertRaises(ValueError, pbcl.group_of, "Tob")

    def test_references_are_parsed(self):
        self.assertEqual(pbcl.parse_ref("1Sam 3:4"), ("1Sam", 3, 4))
        self.assertEqual(pbcl.parse_ref("Song 8:14"), ("Song", 8, 14))
        self.assertRaises(ValueError, pbcl.parse_ref, "John 3")

    def test_verses_are_labelled_and_split_and_reserved_books_refused(self):
        refs = ["Gen 1:1", "Ps 23:1", "Rev 10:2", "Mark 15:3", "Acts 2:1", "Jude 1:25"]
        texts = ["In the beginning", "The LORD is my shepherd", "a little book", "and the chief priests",
                 "Pentecost", "To the only wise God"]
        out = pbcl.label_verses(refs, texts)
        self.assertEqual([l for l, _, _ in out["train"]], ["law", "wisdom", "epistles", "epistles"])
        self.assertEqual(out["test"], [("apocalypse", "Rev 10:2", "a little book")])
        self.assertEqual(out["dev"], [("gospels", "Mark 15:3", "and the chief priests")])
        self.assertRaises(ValueError, pbcl.label_verses, ["Rom 1:1"], ["Paul"])
        self.assertRaises(ValueError, pbcl.label_verses, ["Gen 1:1"], ["a\tb"])
        self.assertRaises(ValueError, pbcl.label_verses, ["Gen 1:1"], [])

    def test_files_are_written_in_canonical_order(self):
        out = pbcl.label_verses(["Rev 1:1", "Gen 2:1", "Gen 1:2"], ["c", "b", "a"])
        with tempfile.TemporaryDirectory() as d:
            pbcl.write_classes(d, out)
            with open(os.path.join(d, "train.tsv"), encoding="utf-8") as f:
                self.assertEqual(f.read(), "law\ta\nlaw\tb\napocalypse\tc\n")
            with open(os.path.join(d, "train.ids"), encoding="utf-8") as f:
                self.assertEqual(f.read(), "Gen 1:2\nGen 2:1\nRev 1:1\n")
            with open(os.path.join(d, "train.txt"), encoding="utf-8") as f:
                self.assertEqual(f.read(), "a\nb\nc\n")
            with open(os.path.join(d, "test.tsv"), encoding="utf-8") as f:
                self.assertEqual(f.read(), "")
            self.assertTrue(os.path.exists(os.path.join(d, "dev.txt")))
            self.assertFalse(os.path.exists(os.path.join(d, "test.txt")))  # never pretrained on


if __name__ == "__main__":
    unittest.main()
