"""Unit tests of scripts/prepare_bible_corpus.py on lines captured from diatheke.

    python3 -m unittest tests/python/test_prepare_bible_corpus.py

Pure functions on strings: diatheke and the SWORD modules are not needed.  The
sample lines were captured with `diatheke -b MODULE -f plain -o h -k BOOK`
(diatheke 4.8, sword-text-sparv 2.60-1, sword-text-kjv 14.3-1).
"""

import collections
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

import prepare_bible_corpus as pbc  # noqa: E402

# KJV, Psalms with -o h: a title before verse 1, leading blanks, blank lines,
# trailing spaces.
KJV_PSALM_9 = (
    "To the chief Musician upon Muthlabben, A Psalm of David.\n"
    "   Psalms 9:1: I will praise thee, O LORD, with my whole heart; I will shew forth "
    "all thy marvellous works. \n"
    "\n"
    " Psalms 9:2: I will be glad and rejoice in thee: I will sing praise to thy name, "
    "O thou most High. \n"
    "\n"
    "(engKJV2006eb)\n"
)
# KJV Philemon with -o h: the subscription comes after the last verse.
KJV_PHILEMON_END = (
    " Philemon 1:24: Marcus, Aristarchus, Demas, Lucas, my fellowlabourers.\n"
    " Philemon 1:25: The grace of our Lord Jesus Christ be with your spirit. Amen.    \n"
    "Written from Rome to Philemon, by Onesimus, a servant.\n"
    " \n"
    "(engKJV2006eb)\n"
)
KJV_PSALM_119_9 = (
    " Psalms 119:8: I will keep thy statutes: O forsake me not utterly. \n"
    "\n"
    "\n"
    "\u05d1 BETH.\n"
    "   Psalms 119:9: Wherewithal shall a young man cleanse his way? by taking heed "
    "thereto according to thy word. \n"
)
SPA_JONAH_1_17 = "Jonah 1:16: Y temieron aquellos hombres á Jehová con gran temor; " \
    "y ofrecieron sacrificio á Jehová, y prometieron votos.\nJonah 1:17: \n(spaRV1909eb)\n"
SPA_3JOHN_1 = "III John 1:1: EL anciano al muy amado Gaio, al cual yo amo en verdad.\n" \
    "(spaRV1909eb)\n"

# RV1909 verse texts (after "Book C:V: ")
SPA_MARK_1_1 = "PRINCIPIO del evangelio de Jesucristo <G5547>, Hijo de Dios."
SPA_PS_6_1 = ("Al Músico principal: en Neginoth sobre Seminith <H8066>: Salmo de David. "
              "JEHOVÁ, no me reprendas en tu furor, ni me castigues con tu ira.")
SPA_EPH_2_1 = ("YDE ella recibisteis vosotros, que estabais <G5607> muertos en vuestros "
               "delitos y pecados,")
SPA_ZEPH_3_17 = ("Jehová <H0430> en medio de ti, poderoso, él salvará; gozaráse sobre ti con "
                 "alegría, callará de amor, se regocijará sobre ti con cantar.")
SPA_GEN_1_1 = "EN el principio crió Dios los cielos y la tierra."
SPA_JOB_39_1 = "¿CAZARÁS tú la presa para el león? ¿y saciarás el hambre de los leoncillos,"
SPA_JOSH_19_1 = ("LA SEGUNDA suerte salió por Simeón, por la tribu de los hijos de Simeón "
                 "conforme á sus familias; y su heredad fué entre la heredad de los hijos "
                 "de Judá.")
SPA_PS_23_1 = "Salmo de David. JEHOVÁ es mi pastor; nada me faltará."
SPA_PS_25_1 = "Salmo de David. A TI, oh Jehová, levantaré mi alma."
SPA_PS_120_1 = "Cántico gradual. A JEHOVÁ llamé estando en angustia, y él me respondió."
SPA_PS_111_1 = ("Aleluya <H3050>. ALABARÉ á Jehová con todo el corazón, en la compañía y "
                "congregación de los rectos.")
SPA_PS_119_1 = "ALEPH. BIENAVENTURADOS los perfectos de camino; los que andan en la ley de Jehová."
SPA_PS_119_9 = "BETH ¿Con qué limpiará el joven su camino? Con guardar tu palabra."
SPA_PS_119_17 = "GIMEL. Haz bien á tu siervo; que viva y guarde tu palabra."
SPA_JOHN_9_1 = "Y PASANDOJesús, vió un hombre ciego desde su nacimiento."
SPA_2COR_6_1 = ("Y ASÍnosotros, comoayudadores juntamente con él, os exhortamos también á "
                "que no recibáis en vano la gracia de Dios,")
SPA_EZEK_1_1 = ("Y FUÉqueá los treinta años, en el mescuarto, á cinco del mes, estando yo en "
                "medio de los trasportados junto al río de Chebar, los cielos se abrieron, y "
                "vi visiones de Dios.")
SPA_JOHN_19_19 = ("Y escribió también Pilato un título, que puso encima de la cruz. Y el "
                  "escrito era: JESUS NAZARENO, REY DE LOS JUDIOS.")
SPA_GAL_6_18 = ("Hermanos, la gracia de nuestro Señor Jesucristo <G5547> sea con vuestro "
                "espíritu. Amén. Enviada de Roma á los Gálatas.   ")
SPA_JUDG_2_1 = "Y El ángel de Jehová subió de Gilgal á Bochîm, y dijo:"

# KJV verse texts
KJV_GEN_1_6 = ("\u00b6 And God said, Let there be a firmament in the midst of the waters, and "
               "let it divide the waters from the waters.")
KJV_1KGS_13_9 = ("For so was it charged me by the word of the \\nd LORD, saying, Eat no bread, "
                 "nor drink water, nor turn again by the same way that thou camest.")
KJV_1JOHN_2_23 = ("Whosoever denieth the Son, the same hath not the Father: [but] he that "
                  "acknowledgeth the Son hath the Father also.")
KJV_PS_3_1 = ("LORD, how are they increased that trouble me! many are they that rise up "
              "against me. ")

CASING = {"jehová": "Jehová", "jesús": "Jesús", "segunda": "segunda", "ti": "ti",
          "de": "de", "ella": "ella", "nosotros": "nosotros", "los": "los"}


class ParseTest(unittest.TestCase):
    def test_verse_lines_and_psalm_title(self):
        verses, headings = pbc.parse_diatheke(KJV_PSALM_9, "Psalms")
        self.assertEqual([(c, v) for c, v, _ in verses], [(9, 1), (9, 2)])
        self.assertTrue(verses[0][2].startswith(" I will praise thee, O LORD"))
        self.assertEqual(len(headings), 1)
        self.assertEqual(headings[0].text,
                         "To the chief Musician upon Muthlabben, A Psalm of David.")
        self.assertEqual(headings[0].next_key, (9, 1))
        self.assertEqual(pbc.classify_heading("Ps", headings[0]), "psalm title")

    def test_subscription_after_last_verse(self):
        verses, headings = pbc.parse_diatheke(KJV_PHILEMON_END, "Philemon")
        self.assertEqual([(c, v) for c, v, _ in verses], [(1, 24), (1, 25)])
        self.assertEqual([h.text for h in headings],
                         ["Written from Rome to Philemon, by Onesimus, a servant."])
        self.assertEqual(pbc.classify_heading("Phlm", headings[0]), "subscription")

    def test_acrostic_heading(self):
        verses, headings = pbc.parse_diatheke(KJV_PSALM_119_9, "Psalms")
        self.assertEqual(len(verses), 2)
        self.assertEqual(headings[0].text, "\u05d1 BETH.")
        self.assertEqual(pbc.classify_heading("Ps", headings[0]), "acrostic")

    def test_module_line_is_not_a_heading_and_empty_verse_is_kept(self):
        verses, headings = pbc.parse_diatheke(SPA_JONAH_1_17, "Jonah")
        self.assertEqual(headings, [])
        self.assertEqual(verses[-1][:2], (1, 17))
        self.assertEqual(pbc.basic_clean(verses[-1][2]), "")

    def test_printed_book_name(self):
        verses, _ = pbc.parse_diatheke(SPA_3JOHN_1, "III John")
        self.assertEqual(verses, [(1, 1, " EL anciano al muy amado Gaio, al cual yo amo en "
                                   "verdad.")])

    def test_verse_of_another_book_is_an_error(self):
        with self.assertRaises(ValueError):
            pbc.parse_diatheke("Judges 1:1: Now after the death of Joshua\n", "Jude")

    def test_book_table(self):
        names = {osis: name for osis, _, name in pbc.BOOKS}
        self.assertEqual(len(pbc.BOOKS), 66)
        self.assertEqual(names["3John"], "III John")
        self.assertEqual(names["Rev"], "Revelation of John")
        self.assertEqual(names["Song"], "Song of Solomon")


class StrongsTest(unittest.TestCase):
    def test_one(self):
        self.assertEqual(pbc.remove_strongs(SPA_MARK_1_1),
                         ("PRINCIPIO del evangelio de Jesucristo, Hijo de Dios.", 1))

    def test_inside_a_sentence(self):
        text, n = pbc.remove_strongs(SPA_EPH_2_1)
        self.assertEqual(n, 1)
        self.assertIn("que estabais muertos en", text)
        text, n = pbc.remove_strongs(SPA_ZEPH_3_17)
        self.assertTrue(text.startswith("Jehová en medio de ti,"))

    def test_several_hebrew(self):
        text, n = pbc.remove_strongs("la casa de Joab <H1004> <H3097>, y")
        self.assertEqual((text, n), ("la casa de Joab, y", 2))

    def test_plain_text_unchanged(self):
        self.assertEqual(pbc.remove_strongs(KJV_PS_3_1), (KJV_PS_3_1, 0))
        self.assertEqual(pbc.remove_strongs("a < b > c"), ("a < b > c", 0))

    def test_basic_clean_counts(self):
        stats = collections.Counter()
        self.assertEqual(pbc.basic_clean(SPA_PS_111_1, stats),
                         "Aleluya. ALABARÉ á Jehová con todo el corazón, en la compañía y "
                         "congregación de los rectos.")
        self.assertEqual(stats["Strong's numbers removed"], 1)


class MarkupTest(unittest.TestCase):
    def test_pilcrow(self):
        stats = collections.Counter()
        self.assertTrue(pbc.basic_clean(KJV_GEN_1_6, stats).startswith("And God said, Let"))
        self.assertEqual(stats["pilcrows removed"], 1)

    def test_usfm_divine_name_marker(self):
        stats = collections.Counter()
        out = pbc.basic_clean(KJV_1KGS_13_9, stats)
        self.assertIn("by the word of the LORD, saying", out)
        self.assertNotIn("\\", out)
        self.assertEqual(stats["USFM markers removed"], 1)

    def test_brackets_keep_the_word(self):
        self.assertIn("the Father: but he that", pbc.basic_clean(KJV_1JOHN_2_23))

    def test_whitespace(self):
        self.assertEqual(pbc.basic_clean("  a   b\t c  "), "a b c")
        self.assertEqual(pbc.basic_clean(KJV_PS_3_1)[-4:], " me.")


class CapsTest(unittest.TestCase):
    def restore(self, text):
        return pbc.restore_chapter_caps(text, CASING)[0]

    def test_first_word(self):
        self.assertEqual(self.restore(SPA_GEN_1_1),
                         "En el principio crió Dios los cielos y la tierra.")
        self.assertEqual(self.restore(pbc.remove_strongs(SPA_MARK_1_1)[0]),
                         "Principio del evangelio de Jesucristo, Hijo de Dios.")

    def test_after_opening_question_mark(self):
        self.assertTrue(self.restore(SPA_JOB_39_1).startswith("¿Cazarás tú la presa"))

    def test_two_words_in_capitals(self):
        self.assertTrue(self.restore(SPA_JOSH_19_1).startswith("La segunda suerte salió"))
        self.assertEqual(self.restore("A TI, oh Jehová, levantaré mi alma."),
                         "A ti, oh Jehová, levantaré mi alma.")

    def test_proper_noun_keeps_its_capital(self):
        self.assertEqual(self.restore("A JEHOVÁ llamé estando en angustia"),
                         "A Jehová llamé estando en angustia")
        self.assertEqual(self.restore("JEHOVÁ es mi pastor; nada me faltará."),
                         "Jehová es mi pastor; nada me faltará.")

    def test_after_a_first_sentence(self):
        text = pbc.basic_clean(SPA_PS_111_1)
        self.assertEqual(self.restore(text)[:30], "Aleluya. Alabaré á Jehová con ")

    def test_glued_words(self):
        self.assertEqual(self.restore(SPA_JOHN_9_1),
                         "Y pasando Jesús, vió un hombre ciego desde su nacimiento.")
        self.assertTrue(self.restore(SPA_2COR_6_1).startswith("Y así nosotros, comoayudadores"))
        self.assertTrue(self.restore(SPA_EZEK_1_1).startswith("Y fué queá los treinta"))
        self.assertTrue(self.restore(pbc.basic_clean(SPA_EPH_2_1))
                        .startswith("Y de ella recibisteis"))

    def test_split_glued_caps(self):
        self.assertEqual(pbc.split_glued_caps("ASÍnosotros,"), "ASÍ nosotros,")
        self.assertEqual(pbc.split_glued_caps("PASANDOJesús,", CASING), "PASANDO Jesús,")
        self.assertEqual(pbc.split_glued_caps("JEHOVÁ,"), "JEHOVÁ,")
        self.assertEqual(pbc.split_glued_caps("Jehová"), "Jehová")

    def test_genuine_capitals_are_kept(self):
        # an inscription late in the verse is not a chapter's first word
        self.assertEqual(pbc.restore_chapter_caps(SPA_JOHN_19_19, CASING),
                         (SPA_JOHN_19_19, False))
        self.assertEqual(pbc.restore_chapter_caps(SPA_JUDG_2_1, CASING),
                         (SPA_JUDG_2_1, False))

    def test_kjv_capitals_are_not_chapter_capitals_in_kjv_text(self):
        # the script never re-cases the KJV; LORD is the divine name
        self.assertEqual(pbc.basic_clean(KJV_PS_3_1), KJV_PS_3_1.strip())

    def test_build_casing(self):
        casing = pbc.build_casing(["Dijo Jehová á los hijos", "y los vió Jehová", "LOS REYES",
                                   "Los hijos"])
        self.assertEqual(casing["jehová"], "Jehová")
        self.assertEqual(casing["los"], "los")
        self.assertNotIn("reyes", casing)


class TitleTest(unittest.TestCase):
    def test_inline_psalm_titles(self):
        self.assertEqual(pbc.strip_inline_title(SPA_PS_23_1),
                         ("JEHOVÁ es mi pastor; nada me faltará.", "Salmo de David."))
        self.assertEqual(pbc.strip_inline_title(SPA_PS_25_1),
                         ("A TI, oh Jehová, levantaré mi alma.", "Salmo de David."))
        self.assertEqual(pbc.strip_inline_title(SPA_PS_120_1)[1], "Cántico gradual.")
        text, title = pbc.strip_inline_title(pbc.basic_clean(SPA_PS_6_1))
        self.assertEqual(title, "Al Músico principal: en Neginoth sobre Seminith: Salmo de David.")
        self.assertTrue(text.startswith("JEHOVÁ, no me reprendas"))

    def test_no_title(self):
        self.assertEqual(pbc.strip_inline_title(SPA_GEN_1_1), (SPA_GEN_1_1, ""))
        self.assertEqual(pbc.strip_inline_title("¿POR qué se amotinan las gentes"),
                         ("¿POR qué se amotinan las gentes", ""))

    def test_acrostic_letters(self):
        self.assertEqual(pbc.strip_acrostic(SPA_PS_119_1)[0][:16], "BIENAVENTURADOS ")
        self.assertEqual(pbc.strip_acrostic(SPA_PS_119_9),
                         ("¿Con qué limpiará el joven su camino? Con guardar tu palabra.", 1))
        self.assertEqual(pbc.strip_acrostic(SPA_PS_119_17)[0][:9], "Haz bien ")
        self.assertEqual(pbc.strip_acrostic("Haz bien á tu siervo"), ("Haz bien á tu siervo", 0))

    def test_subscription(self):
        text, sub = pbc.strip_subscription(pbc.basic_clean(SPA_GAL_6_18))
        self.assertEqual(text, "Hermanos, la gracia de nuestro Señor Jesucristo sea con vuestro "
                               "espíritu. Amén.")
        self.assertEqual(sub, "Enviada de Roma á los Gálatas.")
        self.assertEqual(pbc.strip_subscription("Gracia sea con todos. Amén."),
                         ("Gracia sea con todos. Amén.", ""))


class SplitTest(unittest.TestCase):
    def test_assignment(self):
        self.assertEqual(pbc.split_of("John"), "test")
        self.assertEqual(pbc.split_of("Mark"), "dev")
        for osis in ("Gen", "Ps", "Acts", "1John", "3John", "Jude", "Rev"):
            self.assertEqual(pbc.split_of(osis), "train", osis)
        for osis in ("Matt", "Luke", "Rom"):
            self.assertIsNone(pbc.split_of(osis), osis)
        with self.assertRaises(KeyError):
            pbc.split_of("Tobit")

    def test_reserved_books_are_never_read(self):
        read = [osis for osis, _, _ in pbc.books_to_read()]
        self.assertEqual(len(read), 63)
        for osis in ("Matt", "Luke", "Rom"):
            self.assertNotIn(osis, read)
        self.assertEqual([o for o in read if pbc.split_of(o) == "test"], ["John"])
        self.assertEqual([o for o in read if pbc.split_of(o) == "dev"], ["Mark"])

    def test_output_check_rejects_reserved(self):
        bad = {"train": [("Matt 1:1", "LIBRO de la generación", "The book of the")],
               "dev": [], "test": []}
        with self.assertRaises(AssertionError):
            pbc.check_output(bad)
        misplaced = {"train": [("John 1:1", "En el principio", "In the beginning")],
                     "dev": [], "test": []}
        with self.assertRaises(AssertionError):
            pbc.check_output(misplaced)


class AlignmentTest(unittest.TestCase):
    LEXICON = ({"león": {"lion"}, "cabras": {"goats"}, "águila": {"eagle"},
                "asno": {"ass"}, "caballo": {"horse"}},
               {"lion": {"león"}, "goats": {"cabras"}, "eagle": {"águila"},
                "ass": {"asno"}, "horse": {"caballo"}})

    def test_similarity(self):
        self.assertEqual(pbc.lexical_similarity("el león", "the lion", self.LEXICON), 1.0)
        self.assertEqual(pbc.lexical_similarity("el león", "the goats", self.LEXICON), 0.0)
        self.assertIsNone(pbc.lexical_similarity("y dijo", "and he said", self.LEXICON))

    def test_shifted_chapter_is_found(self):
        # Job 38:39-39:x in small: the Spanish is one verse behind after an empty verse
        en = ["the lion", "the goats", "the ass", "the horse", "the eagle"]
        es = ["", "el león", "las cabras", "el asno", "el caballo y el águila"]
        offs = pbc.best_offsets(es, en, self.LEXICON, max_offset=2, switch_cost=0.5)
        self.assertEqual(offs[1:4], [-1, -1, -1])
        same = pbc.best_offsets(["el león", "las cabras"], ["the lion", "the goats"],
                                self.LEXICON)
        self.assertEqual(same, [0, 0])

    def test_gale_church_merge(self):
        c, s2 = 1.0, 2.0
        # equal lengths: all one-to-one
        self.assertEqual(pbc.gale_church_one_to_one([50, 80, 60], [50, 80, 60], c, s2),
                         {(0, 0), (1, 1), (2, 2)})
        # the Spanish verse 2 holds English verses 2 and 3 (Acts 19:40-41)
        pairs = pbc.gale_church_one_to_one([50, 80, 150], [50, 80, 90, 60], c, s2)
        self.assertIn((0, 0), pairs)
        self.assertNotIn((2, 2), pairs)

    def test_length_model(self):
        c, s2 = pbc.estimate_length_model([(90, 100), (180, 200), (45, 50), (0, 10)])
        self.assertAlmostEqual(c, 0.9)
        self.assertGreater(s2, 0)


class BuildTest(unittest.TestCase):
    """build() and write_corpus() on a tiny fake Bible."""

    @staticmethod
    def fake_raw():
        def book(lines, name):
            return pbc.parse_diatheke("".join("%s %s\n" % (name, l) for l in lines), name)
        raw = {}
        gen_es = ["1:1: EN el principio crió Dios los cielos y la tierra.",
                  "1:2: Y la tierra estaba desordenada y vacía <H0922>.",
                  "1:3: Y dijo Dios: Sea la luz: y fué la luz."]
        gen_en = ["1:1: In the beginning God created the heaven and the earth.",
                  "1:2: And the earth was without form, and void.",
                  "1:3: \u00b6 And God said, Let there be light: and there was light."]
        raw[("Gen", "es")] = book(gen_es, "Genesis")
        raw[("Gen", "en")] = book(gen_en, "Genesis")
        raw[("Ps", "es")] = pbc.parse_diatheke(
            "Psalms 23:1: " + SPA_PS_23_1 + "\nPsalms 111:1: " + SPA_PS_111_1 + "\n", "Psalms")
        raw[("Ps", "en")] = pbc.parse_diatheke(
            "A Psalm of David.\n   Psalms 23:1: The LORD is my shepherd; I shall not want.\n"
            "   Psalms 111:1: Praise ye the LORD. I will praise the LORD with my whole heart, "
            "in the assembly of the upright, and in the congregation.\n", "Psalms")
        raw[("Acts", "es")] = book(["1:1: EN el primer tratado, oh Teófilo, he hablado de "
                                    "todas las cosas que Jesús comenzó á hacer y á enseñar,",
                                    "1:2: Hasta el día en que fué recibido arriba, Jesús"],
                                   "Acts")
        raw[("Acts", "en")] = book(["1:1: The former treatise have I made, O Theophilus, of "
                                    "all that Jesus began both to do and teach,",
                                    "1:2: Until the day in which he was taken up, Jesus"],
                                   "Acts")
        raw[("Mark", "es")] = book(["1:1: " + SPA_MARK_1_1], "Mark")
        raw[("Mark", "en")] = book(["1:1: The beginning of the gospel of Jesus Christ, the "
                                    "Son of God;"], "Mark")
        raw[("John", "es")] = book(["9:1: " + SPA_JOHN_9_1, "9:2: "], "John")
        raw[("John", "en")] = book(["9:1: And as Jesus passed by, he saw a man which was blind "
                                    "from his birth.", "9:2: And his disciples asked him."],
                                   "John")
        # a reserved book handed in by mistake must be ignored
        raw[("Matt", "es")] = book(["1:1: LIBRO de la generación de Jesucristo"], "Matthew")
        raw[("Matt", "en")] = book(["1:1: The book of the generation of Jesus Christ"],
                                   "Matthew")
        return raw

    def test_build_and_write(self):
        pairs, stats, notes = pbc.build(self.fake_raw())
        ids = {s: [p[0] for p in pairs[s]] for s in pairs}
        self.assertEqual(ids["test"], ["John 9:1"])
        self.assertEqual(ids["dev"], ["Mark 1:1"])
        self.assertNotIn("Matt 1:1", sum(ids.values(), []))
        train = {p[0]: p for p in pairs["train"]}
        self.assertEqual(train["Gen 1:1"][1], "En el principio crió Dios los cielos y la tierra.")
        self.assertEqual(train["Gen 1:2"][1], "Y la tierra estaba desordenada y vacía.")
        self.assertEqual(train["Gen 1:3"][2], "And God said, Let there be light: and there was "
                                              "light.")
        self.assertEqual(train["Ps 23:1"][1], "Jehová es mi pastor; nada me faltará.")
        # no KJV title for Psalm 111: "Aleluya." is verse text
        self.assertTrue(train["Ps 111:1"][1].startswith("Aleluya. Alabaré á Jehová"))
        # "Jesús" is known from the train books (Acts), so the glued J goes with it
        self.assertEqual(pairs["test"][0][1],
                         "Y pasando Jesús, vió un hombre ciego desde su nacimiento.")
        self.assertEqual(stats["pairs dropped: Spanish verse empty"], 1)
        self.assertEqual(stats["titles dropped (KJV title lines + RV1909 inline titles)"], 2)
        self.assertEqual(stats["Strong's numbers removed"], 3)

        with tempfile.TemporaryDirectory() as d:
            pbc.write_corpus(d, pairs, stats)
            first = {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}
            pbc.write_corpus(d, pairs, stats)
            second = {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}
        self.assertEqual(first, second)
        self.assertEqual(sorted(first), ["README.txt"] + sorted(
            "%s.%s" % (s, e) for s in ("train", "dev", "test") for e in ("es", "en", "ids")))
        for split in ("train", "dev", "test"):
            n = [first["%s.%s" % (split, e)].decode("utf-8").count("\n")
                 for e in ("es", "en", "ids")]
            self.assertEqual(len(set(n)), 1, split)
            for e in ("es", "en", "ids"):
                text = first["%s.%s" % (split, e)].decode("utf-8")
                self.assertNotIn("\n\n", text)
                self.assertNotIn("Matt", text if e == "ids" else "")


if __name__ == "__main__":
    unittest.main()
