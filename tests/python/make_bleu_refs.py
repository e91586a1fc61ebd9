#!/usr/bin/env python3
"""Reference data for tests/eval/bleu_test.cpp and chrf_test.cpp: corpus BLEU and chrF by sacreBLEU.

Needs the `sacrebleu` package (2.x) in the interpreter CTest runs (QKV_PYTHON, /usr/bin/python3):
    pip install sacrebleu        (Debian's python: /usr/bin/python3 -m pip install --break-system-packages sacrebleu)
This script installs nothing; it fails with that hint when sacrebleu is missing.

Usage: make_bleu_refs.py --out DIR     (CTest runs this as a fixture before the C++ tests)

Writes, deterministically:

  DIR/bleu/cases.json         {"sacrebleu_version": "2.x.y", "cases": [NAME, ...]}
  DIR/bleu/NAME/hyp.txt       hypotheses, one segment a line (UTF-8)
  DIR/bleu/NAME/ref0.txt ...  one file per reference stream, as long as hyp.txt
  DIR/bleu/NAME/expected.json
      num_refs, num_lines
      bleu: score, counts, totals, precisions, bp, ratio, sys_len, ref_len   (BLEU() defaults)
            line   str(score)          "BLEU = 48.53 82.4/50.0/... (BP = ... ref_len = 18)"
            json   what `sacrebleu REF... -m bleu -f json` prints (width 1, no trailing newline)
      chrf: score, line ("chrF2 = 59.73"), json  (CHRF() defaults: effective order, "eff:yes")
            eps_score, eps_line                  (CHRF(eps_smoothing=True), --chrf-eps-smoothing)
      tokenized_hyp   Tokenizer13a()(line.rstrip()) of every hypothesis line
  DIR/bleu/tokenizer_13a.json [[input, Tokenizer13a()(input.rstrip())], ...] for fuzzed strings

The files are read back exactly as the sacrebleu command line reads its inputs (open(...,
newline="\\n"), line.rstrip()) and scored through the library calls the command line makes, so
`sacrebleu ref0.txt ref1.txt -i hyp.txt` prints the same. Hypothesis files hold neither a tab nor a
carriage return (reading from standard input, sacrebleu splits a line at tabs into several systems
and treats a lone CR as a line break); references may hold both. A few cases are also run through
the real command line (`python -m sacrebleu ... < hyp.txt`) as a check of that claim.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys

try:
    import sacrebleu
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
except ImportError:  # pragma: no cover
    sys.exit("make_bleu_refs.py needs sacrebleu: pip install sacrebleu")

if not sacrebleu.__version__.startswith("2."):
    sys.exit(f"make_bleu_refs.py needs sacrebleu 2.x, found {sacrebleu.__version__}")

# ----------------------------------------------------------------------------------- vocabulary --

ENGLISH = (
    "the a an of to in and is was it that for on with as by at from this be are not or have has had "
    "dog man cat house city river government year people time day week report said would could "
    "new old first last many more most some other only also very good great small large long high "
    "run runs ran bite bit bitten see saw seen make made take took give gave say says tell told"
).split()
UNICODE_WORDS = [
    "café", "niño", "señor", "über", "naïve", "façade", "Ελλάδα", "Москва", "日本語", "中文",
    "東京都", "한국어", "😀", "𝔘𝔫𝔦", "e\u0301", "İstanbul", "straße", "Øresund", "ﬁne", "١٢٣",
    "\u200bzero", "x\u00adsoft", "\ufeffbom",
]
SPECIAL = [
    ",", ".", "!", "?", ";", ":", "(", ")", '"', "'", "“", "”", "‘", "’", "—", "–", "…", "«", "»",
    "&", "&amp;", "&quot;", "&lt;", "&gt;", "&amp;quot;", "<skipped>", "/", "\\", "@", "#", "$", "%",
    "*", "+", "=", "[", "]", "{", "}", "|", "~", "^", "_", "`", "-", "--", "...",
]
NUMBERISH = [
    "3.14", "1,000", "2,5", "10-20", "1990s", "5-year", "-5", "3.", ".5", "1.2.3", "12,345.67",
    "4-", "a-b", "co-operate", "e-mail", "U.S.", "e.g.", "Mr.", "don't", "it's", "O'Neil",
    "rock'n'roll", "'quoted'", "(hi)", "\"quoted\"", "x.y", "a,b", "1.a", "a.1", "9,x", "7-7-7",
    "1-", "$5", "50%", "#1", "12:30", "a/b", "http://ex.com/a?b=1&c=2", "user@mail.com",
]
SPACES = [" "] * 12 + ["  ", "\u00a0", "\u3000", "\u2009", "\u2028", "\x1c", "\x0b", "\x0c", "\x85",
                       "\u200b", "\u202f"]
REF_ONLY_SPACES = ["\t", "\r"]  # fine in reference files, not on a hypothesis line (see above)

REAL = [
    # (hypothesis, reference 0, reference 1)
    ("The cat sat on the mat.", "The cat is sitting on the mat.", "A cat sat on the mat."),
    ("It is raining heavily in London today.", "It's raining hard in London today.",
     "Today, heavy rain is falling in London."),
    ("The government announced new measures on Tuesday.",
     "On Tuesday the government announced new measures.",
     "New measures were announced by the government on Tuesday."),
    ("He said he would come back at 5 p.m.", "He said he'd be back at 5 p.m.",
     "He told us he would return at 5pm."),
    ("The company's profits rose by 12.5% in 2023.", "The company's profit increased 12.5% in 2023.",
     "In 2023, the firm's profits grew by 12.5%."),
    ("She doesn't know where the keys are.", "She does not know where the keys are.",
     "She has no idea where the keys are."),
    ("The meeting was postponed until next week.", "The meeting has been postponed to next week.",
     "They postponed the meeting until next week."),
    ("Scientists discovered a new species of frog in the Amazon rainforest.",
     "Scientists have discovered a new frog species in the Amazon rain forest.",
     "A new species of frog was discovered by scientists in the Amazon."),
    ("Prices for oil fell sharply on Monday after the announcement.",
     "Oil prices fell sharply on Monday following the announcement.",
     "On Monday, oil prices dropped sharply after the announcement."),
    ("\"We are very happy with the result,\" the coach said.",
     "\"We're very pleased with the result,\" said the coach.",
     "The coach said: \"We are very happy with the outcome.\""),
    ("The train from Paris to Berlin takes about eight hours.",
     "The train journey from Paris to Berlin takes around eight hours.",
     "It takes about 8 hours by train from Paris to Berlin."),
    ("I have lived here for ten years.", "I've lived here for ten years.",
     "I have been living here for 10 years."),
    ("The museum is closed on Mondays and public holidays.",
     "The museum is closed on Mondays and on public holidays.",
     "On Mondays and bank holidays the museum is closed."),
    ("Unemployment dropped to 4.2 per cent in March.", "Unemployment fell to 4.2% in March.",
     "In March, the unemployment rate dropped to 4.2 percent."),
    ("The bridge, built in 1890, was renovated last year.",
     "The bridge, which was built in 1890, was renovated last year.",
     "Built in 1890, the bridge underwent renovation last year."),
    ("Please send me the report by Friday.", "Please send the report to me by Friday.",
     "Send me the report by Friday, please."),
]


def random_word(rng):
    r = rng.random()
    if r < 0.55:
        w = rng.choice(ENGLISH)
        if rng.random() < 0.15:
            w = w.capitalize()
    elif r < 0.70:
        w = rng.choice(UNICODE_WORDS)
    elif r < 0.85:
        w = rng.choice(NUMBERISH)
    else:
        w = rng.choice(SPECIAL)
    # glue punctuation onto words now and then ("word," "(word" "word.")
    if rng.random() < 0.2:
        w = w + rng.choice([",", ".", "!", "?", ":", ";", ")", "'s", "-", "”", "…", "\"", "'"])
    if rng.random() < 0.08:
        w = rng.choice(["(", "\"", "“", "'", "-", "["]) + w
    return w


def join_words(rng, words, ref):
    pool = SPACES + (REF_ONLY_SPACES if ref else [])
    out = ""
    for i, w in enumerate(words):
        if i:
            out += rng.choice(pool) if rng.random() < 0.15 else " "
        out += w
    if rng.random() < 0.1:
        out = rng.choice(pool) + out
    if rng.random() < 0.1:
        out += rng.choice(pool)
    return out


def perturb(rng, words):
    """A hypothesis-like variant of a reference: drops, substitutions, duplicates, local swaps."""
    out = []
    for w in words:
        r = rng.random()
        if r < 0.12:
            continue
        if r < 0.25:
            out.append(random_word(rng))
        elif r < 0.30:
            out += [w, w]
        else:
            out.append(w)
    for _ in range(rng.randrange(3)):
        if len(out) > 1:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]
    if rng.random() < 0.1:
        out += [random_word(rng) for _ in range(rng.randrange(1, 6))]
    return out


def random_case(rng, num_lines, num_refs, empty_rate=0.03):
    hyps, refs = [], [[] for _ in range(num_refs)]
    for _ in range(num_lines):
        base = [random_word(rng) for _ in range(rng.randrange(0, 30))]
        for k in range(num_refs):
            words = perturb(rng, base) if k else base
            refs[k].append("" if rng.random() < empty_rate else join_words(rng, words, ref=True))
        hyps.append("" if rng.random() < empty_rate else join_words(rng, perturb(rng, base), ref=False))
    return hyps, refs


# ---------------------------------------------------------------------------------------- cases --

def build_cases():
    """name -> (hyp lines, [ref stream lines...], options)."""
    cases = {}
    readme_refs = [
        ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
        ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
    ]
    readme_sys = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    cases["readme"] = (readme_sys, readme_refs, {})
    cases["readme_ref0"] = (readme_sys, readme_refs[:1], {})
    cases["readme_ref1"] = (readme_sys, readme_refs[1:], {})
    cases["identical"] = (readme_refs[0], [readme_refs[0]], {})
    cases["real_english"] = ([h for h, _, _ in REAL], [[r0 for _, r0, _ in REAL], [r1 for _, _, r1 in REAL]], {})
    cases["real_english_ref0"] = ([h for h, _, _ in REAL], [[r0 for _, r0, _ in REAL]], {})
    cases["empty_hyp_lines"] = (
        ["The dog bit the man.", "", "The man had just bitten him.", "", "   "],
        [["The dog bit the man.", "It was not unexpected.", "The man bit him first.", "Hello there.",
          "Nothing."]], {})
    cases["all_empty_hyp"] = (["", "", ""], [["The dog bit the man.", "It was not unexpected.", "x"]], {})
    cases["empty_refs"] = (["The dog bit the man.", "It wasn't surprising.", "Something else."],
                           [["The dog bit the man.", "", ""]], {})
    cases["all_empty"] = (["", ""], [["", ""]], {})
    cases["one_line"] = (["The quick brown fox jumps over the lazy dog."],
                         [["A quick brown fox jumped over the lazy dog."]], {})
    cases["one_line_no_newline"] = (["the the the the the the the"], [["The cat is on the mat."]],
                                    {"final_newline": False})
    cases["one_line_multi_ref"] = (["the cat the cat on the mat"],
                                   [["the cat is on the mat"], ["there is a cat on the mat"]], {})
    cases["zero_match"] = (["alpha beta gamma delta", "epsilon zeta"],
                           [["one two three four", "five six seven"]], {})
    cases["zero_match_chars"] = (["aaaa bbbb", "cccc"], [["xyz", "qrs tuv"]], {})
    cases["unigram_only"] = (["b a d c f e", "x z y"], [["a b c d e f", "x y z"]], {})
    cases["bigram_max"] = (["a b x c d y e f", "p q"], [["a b c d e f", "p q r"]], {})
    cases["short_hyp"] = (["dog", "the man"], [["the dog bit the man", "the man"]], {})
    cases["single_token"] = (["dog"], [["dog"]], {})
    cases["single_char"] = (["a", "b", "c"], [["a", "c", "b"]], {})
    cases["short_chars"] = (["ab", "abc de", "x"], [["abc", "ab cde", "xy"]], {})
    cases["closest_ref_tie"] = (["a b c d e"], [["a b c d"], ["a b c d e f"]], {})
    cases["closest_ref_tie_reversed"] = (["a b c d e"], [["a b c d e f"], ["a b c d"]], {})
    cases["closest_ref_tie_many"] = (["w1 w2 w3 w4 w5 w6", "w1 w2"],
                                     [["w1 w2 w3 w4 w5 w6 w7 w8", "w1"], ["w1 w2 w3 w4", "w1 w2 w3"],
                                      ["w1 w2 w3 w4 w5 w6 w7", "x"]], {})
    cases["hyp_longer"] = (["the dog bit the man and then the man bit the dog back again"],
                           [["the dog bit the man"]], {})
    cases["punctuation_numbers"] = (
        ["The price rose from $3.50 to $4,000.00 (a 1,000% rise) in 1990-1995.",
         "Call 555-1234 or e-mail info@example.com; see http://x.org/a?b=c&d=e.",
         "He said: \"It's 3.14...\" -- and left.",
         "U.S. troops, e.g. 5,000 of them, left at 12:30.",
         "x.y, a,b 1.a a.1 9,x 7-7-7 1- -5 .5 3."],
        [["The price rose from $3.50 to $4,000.00 (a 1,000% increase) in 1990-1995.",
          "Call 555-1234 or email info@example.com; see http://x.org/a?b=c&d=e.",
          "He said: \"It is 3.14...\" - and left.",
          "US troops, e.g. 5,000 of them, left at 12:30.",
          "x.y, a,b 1.a a.1 9,x 7-7-7 1- -5 .5 3."]], {})
    cases["html_entities"] = (
        ["Tom &amp; Jerry &quot;live&quot; &lt;here&gt; &amp;quot; <skipped> done",
         "a&b &ampamp; &lt;&gt;&quot;&amp;", "<skip<skipped>ped> &amp;amp;"],
        [["Tom & Jerry \"live\" <here> &quot; done", "a&b &amp; <>\"&", "<skipped> &amp;"]], {})
    cases["unicode_whitespace"] = (
        ["the\u00a0dog\u3000bit\u2009the\u2028man\x1c.", "\u200bzero width\u202fspace\x85end\x0bx\x0cy",
         "  leading and trailing\u00a0\u3000"],
        [["the dog bit the man.", "zero width space end x y", "leading\tand\rtrailing"]], {})
    cases["unicode_text"] = (
        ["Le café est très “bon” — n’est-ce pas ?", "El niño comió piña y jalapeños.",
         "Straße, Øresund & İstanbul…", "日本語のテキスト、中文文本。", "한국어 문장입니다. 😀 𝔘𝔫𝔦"],
        [["Le café est vraiment “bon” — n’est-ce pas ?", "El niño comió la piña con jalapeños.",
          "Strasse, Øresund and Istanbul...", "日本語のテキスト。中文的文本。", "한국어 문장 입니다. 😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"],
         ["Ce café est “bon”, non ?", "El chico comió piña y jalapeños.",
          "Straße, Øresund & Istanbul…", "日本語テキスト、中国語テキスト。", "한국어 문장이에요 😀"]], {})
    cases["cjk"] = (["我们今天去公园散步。", "東京は日本の首都です", "这是一个测试"],
                    [["今天我们去公园散步。", "日本の首都は東京です", "这是测试"]], {})
    cases["crlf"] = (["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."],
                     readme_refs, {"newline": "\r\n"})
    rng = random.Random(20240611)
    shapes = [(1, 1), (2, 1), (5, 2), (10, 1), (20, 3), (40, 4), (60, 1), (60, 2), (3, 4), (30, 1),
              (15, 2), (50, 3), (8, 1), (25, 2), (100, 1), (7, 3)]
    for i, (lines, nref) in enumerate(shapes):
        hyps, refs = random_case(rng, lines, nref, empty_rate=0.0 if i % 3 else 0.08)
        cases[f"random_{i:02d}"] = (hyps, refs, {"final_newline": i % 5 != 4})
    return cases


def tokenizer_fuzz():
    rng = random.Random(13)
    alphabet = ["a", "b", "Z", "1", "2", "0", ".", ",", "-", " ", " ", "&", "amp;", "quot;", "lt;", "gt;",
                "<skipped>", "<", ">", "é", "中", "😀", "\u00a0", "\u3000", "'", "\"", "(", ")", "$", "%",
                "\u2028", "\x1c", "\t", "\r", "\n", "-\n", "/", "\\", "`", "~", "_", "@", ":", "?", "…",
                "“", "—", "\u200b", "\x85"]
    out = []
    for n in range(3000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 16)))
        out.append(s)
    out += [w for w in NUMBERISH + SPECIAL + UNICODE_WORDS]
    out += [h for h, _, _ in REAL]
    tok = Tokenizer13a()
    return [[s, tok(s.rstrip())] for s in out]


# ---------------------------------------------------------------------------------------- write --

def write_lines(path, lines, newline="\n", final_newline=True):
    text = newline.join(lines) + (newline if final_newline and lines else "")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))


def read_like_cli(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def score_case(case_dir, num_refs):
    hyps = read_like_cli(os.path.join(case_dir, "hyp.txt"))
    refs = [read_like_cli(os.path.join(case_dir, f"ref{k}.txt")) for k in range(num_refs)]
    assert all(len(r) == len(hyps) for r in refs), case_dir

    bleu = BLEU()
    b = bleu.corpus_score(hyps, refs)
    bleu_sig = bleu.get_signature().format(False)
    chrf = CHRF()
    c = chrf.corpus_score(hyps, refs)
    chrf_sig = chrf.get_signature().format(False)
    c_eps = CHRF(eps_smoothing=True).corpus_score(hyps, refs)
    tok = Tokenizer13a()
    return {
        "num_refs": num_refs,
        "num_lines": len(hyps),
        "bleu": {
            "score": b.score, "counts": list(b.counts), "totals": list(b.totals),
            "precisions": list(b.precisions), "bp": b.bp, "ratio": b.ratio,
            "sys_len": b.sys_len, "ref_len": b.ref_len,
            "line": str(b), "json": b.format(1, False, bleu_sig, True),
        },
        "chrf": {
            "score": c.score, "line": str(c), "json": c.format(1, False, chrf_sig, True),
            "eps_score": c_eps.score, "eps_line": str(c_eps),
        },
        "tokenized_hyp": [tok(h.rstrip()) for h in hyps],
    }


def check_with_cli(case_dir, num_refs, expected):
    """The real `sacrebleu REF... < hyp.txt -f json` agrees with what was computed via the library."""
    refs = [os.path.join(case_dir, f"ref{k}.txt") for k in range(num_refs)]
    with open(os.path.join(case_dir, "hyp.txt"), "rb") as hyp:
        out = subprocess.run([sys.executable, "-m", "sacrebleu", *refs, "-m", "bleu", "chrf", "-f", "json"],
                             stdin=hyp, capture_output=True, check=True, env={**os.environ, "NO_COLOR": "1"})
    got = json.loads(out.stdout.decode("utf-8"))
    want = [json.loads(expected["bleu"]["json"]), json.loads(expected["chrf"]["json"])]
    if got != want:
        raise SystemExit(f"{case_dir}: sacrebleu's command line printed {got}, the library gave {want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    root = os.path.join(args.out, "bleu")
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)

    cases = build_cases()
    for name, (hyps, refs, opts) in cases.items():
        assert "\t" not in "".join(hyps) and "\r" not in "".join(hyps), name
        d = os.path.join(root, name)
        os.makedirs(d)
        nl, final = opts.get("newline", "\n"), opts.get("final_newline", True)
        write_lines(os.path.join(d, "hyp.txt"), hyps, nl, final)
        for k, r in enumerate(refs):
            assert len(r) == len(hyps), name
            write_lines(os.path.join(d, f"ref{k}.txt"), r, nl, final)
        expected = score_case(d, len(refs))
        if name in ("readme", "unicode_whitespace", "random_05", "all_empty_hyp"):
            check_with_cli(d, len(refs), expected)
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1)
        print(f"{name}: {expected['bleu']['line']} | {expected['chrf']['line']}")

    with open(os.path.join(root, "tokenizer_13a.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_fuzz(), f, ensure_ascii=False, indent=0)
    with open(os.path.join(root, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"sacrebleu_version": sacrebleu.__version__, "cases": list(cases)}, f, indent=1)
    print(f"wrote {len(cases)} cases to {root} (sacrebleu {sacrebleu.__version__})")


if __name__ == "__main__":
    main()
