// Corpus BLEU and the 13a tokenizer against sacreBLEU (tests/python/make_bleu_refs.py), the text
// helpers they rest on, and `qkv bleu` run as a process (printed line, JSON, error messages).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/ref_dir.h"
#include "qkv/core/error.h"
#include "qkv/eval/bleu.h"
#include "qkv/eval/tokenizer_13a.h"

#include "eval/eval_test_util.h"

using namespace qkv_eval_test;

namespace {

std::string sacrebleu_version() {
  return load_json(qkv::testing::ref_path("bleu/cases.json"))["sacrebleu_version"].get<std::string>();
}

const std::vector<std::string> kReadmeHyps = {"The dog bit the man.", "It wasn't surprising.",
                                              "The man had just bitten him."};
const std::vector<std::vector<std::string>> kReadmeRefs = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};

}  // namespace

// ------------------------------------------------------------------------- without reference data

TEST(Bleu, ReadmeExample) {
  // sacreBLEU's README: BLEU().corpus_score(sys, refs) with two reference streams.
  const qkv::eval::BleuScore s = qkv::eval::corpus_bleu(kReadmeHyps, kReadmeRefs);
  EXPECT_EQ(s.format(), "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_EQ(s.format(1), "BLEU = 48.5 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_EQ(s.counts, (std::array<int64_t, 4>{14, 7, 5, 3}));
  EXPECT_EQ(s.totals, (std::array<int64_t, 4>{17, 14, 11, 8}));
  EXPECT_EQ(s.sys_len, 17);
  EXPECT_EQ(s.ref_len, 18);
}

TEST(Bleu, EdgeCorpora) {
  using qkv::eval::corpus_bleu;
  // No hypothesis tokens: BP 0, score 0.
  EXPECT_EQ(corpus_bleu({"", ""}, {{"a b", "c"}}).format(),
            "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 3)");
  // Nothing at all (sacreBLEU's API rejects an empty list; we score it 0).
  EXPECT_EQ(corpus_bleu({}, {{}}).format(),
            "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)");
  // Unigram matches only: 'exp' smoothing halves the missing orders' 1/total each time.
  const auto s = corpus_bleu({"b a d c"}, {{"a b c d"}});
  EXPECT_DOUBLE_EQ(s.precisions[1], 100.0 / (2 * 3));
  EXPECT_DOUBLE_EQ(s.precisions[2], 100.0 / (4 * 2));
  EXPECT_DOUBLE_EQ(s.precisions[3], 100.0 / (8 * 1));
  // Closest reference length, ties to the shorter.
  EXPECT_EQ(corpus_bleu({"a b c d e"}, {{"a b c d e f"}, {"a b c d"}}).ref_len, 4);
  EXPECT_THROW(corpus_bleu({"a"}, {{"a", "b"}}), qkv::Error);
  EXPECT_THROW(corpus_bleu({"a"}, {}), qkv::Error);
}

TEST(Bleu, Tokenizer13aKnownCases) {
  using qkv::eval::tokenize_13a;
  EXPECT_EQ(tokenize_13a("It wasn't surprising."), "It wasn't surprising .");
  EXPECT_EQ(tokenize_13a("Price: $3.50, 1,000 items (1990-1995)."),
            "Price : $ 3.50 , 1,000 items ( 1990 - 1995 ) .");
  EXPECT_EQ(tokenize_13a("Tom &amp; Jerry &quot;x&quot; &lt;b&gt; <skipped>"), "Tom & Jerry \" x \" < b >");
  EXPECT_EQ(tokenize_13a("e-mail co-op 5-year -5 a.b 3.x x.3"), "e-mail co-op 5 - year -5 a . b 3 . x x . 3");
  EXPECT_EQ(tokenize_13a("caf\xC3\xA9.\xC2\xA0na\xC3\xAFve\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87,"),
            "caf\xC3\xA9 . na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 ,");  // "café. naïve　中文," (NBSP, U+3000)
  EXPECT_EQ(tokenize_13a("   \t "), "");
}

TEST(Bleu, PythonTextSemantics) {
  using namespace qkv::eval;
  for (char32_t c : {U'\t', U'\n', U'\v', U'\f', U'\r', char32_t(0x1C), char32_t(0x1F), U' ', char32_t(0x85),
                     char32_t(0xA0), char32_t(0x1680), char32_t(0x2000), char32_t(0x200A), char32_t(0x2028),
                     char32_t(0x2029), char32_t(0x202F), char32_t(0x205F), char32_t(0x3000)})
    EXPECT_TRUE(is_python_space(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', char32_t(0x1B), char32_t(0x180E), char32_t(0x200B), char32_t(0xFEFF), char32_t(0x2060)})
    EXPECT_FALSE(is_python_space(c)) << static_cast<uint32_t>(c);

  EXPECT_EQ(find_invalid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xC0\x80"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xE4\xB8"), 0u);          // truncated
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);              // stray continuation

  EXPECT_EQ(split_text_lines("", "t"), std::vector<std::string>{});
  EXPECT_EQ(split_text_lines("\n", "t"), std::vector<std::string>{""});
  EXPECT_EQ(split_text_lines("a \r\nb\xC2\xA0\n\nc", "t"), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(split_text_lines("a\rb\n", "t"), std::vector<std::string>{"a\rb"});  // '\n' alone ends a line
  try {
    split_text_lines("ok\nfine\nab\xFFz\n", "some/file.txt");
    ADD_FAILURE() << "no error for invalid UTF-8";
  } catch (const qkv::Error& e) {
    EXPECT_STREQ(e.what(), "some/file.txt:3: invalid UTF-8 (byte 0xFF at column 3)");
  }
}

TEST(Bleu, PythonFloatRepr) {
  using qkv::eval::python_float_repr;
  EXPECT_EQ(python_float_repr(48.53), "48.53");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(100.0), "100.0");
  EXPECT_EQ(python_float_repr(5.1), "5.1");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
}

// ---------------------------------------------------------------------------- against sacreBLEU

TEST(BleuRefs, Tokenizer13aMatchesSacrebleu) {
  const std::string path = qkv::testing::ref_path("bleu/tokenizer_13a.json");
  if (path.empty()) return;
  const json pairs = load_json(path);
  ASSERT_GT(pairs.size(), 3000u);
  int failures = 0;
  for (const auto& p : pairs) {
    const std::string in = p[0].get<std::string>(), want = p[1].get<std::string>();
    const std::string got = qkv::eval::tokenize_13a(in);
    if (got != want && ++failures <= 20) ADD_FAILURE() << "input " << json(in).dump() << "\n  got  " << json(got).dump()
                                                        << "\n  want " << json(want).dump();
  }
  EXPECT_EQ(failures, 0);
}

TEST(BleuRefs, CorpusMatchesSacrebleu) {
  const auto cases = load_cases();
  const std::string version = cases.empty() ? "" : sacrebleu_version();
  for (const RefCase& c : cases) {
    SCOPED_TRACE("case " + c.name);
    const auto hyps = qkv::eval::read_text_lines(c.dir + "/hyp.txt");
    std::vector<std::vector<std::string>> refs;
    for (const auto& f : c.ref_files) refs.push_back(qkv::eval::read_text_lines(f));
    ASSERT_EQ(hyps.size(), c.expected["num_lines"].get<size_t>());

    const json& tok = c.expected["tokenized_hyp"];
    for (size_t i = 0; i < hyps.size(); ++i) EXPECT_EQ(qkv::eval::tokenize_13a(hyps[i]), tok[i].get<std::string>()) << i;

    const json& e = c.expected["bleu"];
    const qkv::eval::BleuScore s = qkv::eval::corpus_bleu(hyps, refs);
    for (int n = 0; n < qkv::eval::kBleuMaxOrder; ++n) {
      EXPECT_EQ(s.counts[n], e["counts"][n].get<int64_t>()) << "order " << n + 1;
      EXPECT_EQ(s.totals[n], e["totals"][n].get<int64_t>()) << "order " << n + 1;
      expect_close(s.precisions[n], e["precisions"][n].get<double>(), "precision");
    }
    EXPECT_EQ(s.sys_len, e["sys_len"].get<int64_t>());
    EXPECT_EQ(s.ref_len, e["ref_len"].get<int64_t>());
    expect_close(s.score, e["score"].get<double>(), "score");
    expect_close(s.bp, e["bp"].get<double>(), "bp");
    expect_close(s.ratio, e["ratio"].get<double>(), "ratio");
    EXPECT_EQ(s.format(), e["line"].get<std::string>());
    EXPECT_EQ(s.format_json(static_cast<int>(refs.size()), 1),
              with_our_version(e["json"].get<std::string>(), version));
  }
}

// -------------------------------------------------------------------------------------- the CLI

TEST(BleuCli, PrintsSacrebleusLineForEveryCase) {
  const auto cases = load_cases();
  const std::string version = cases.empty() ? "" : sacrebleu_version();
  for (const RefCase& c : cases) {
    SCOPED_TRACE("case " + c.name);
    const std::string hyp = c.dir + "/hyp.txt";
    const ProcResult line = run_cmd(qkv_command("bleu", c.ref_files) + " < " + quote(hyp), false);
    EXPECT_EQ(line.exit_code, 0);
    EXPECT_EQ(line.output, c.expected["bleu"]["line"].get<std::string>() + "\n");
    const ProcResult js = run_cmd(qkv_command("bleu", c.ref_files, "--json -w 1 -i " + quote(hyp)), false);
    EXPECT_EQ(js.exit_code, 0);
    EXPECT_EQ(js.output, with_our_version(c.expected["bleu"]["json"].get<std::string>(), version) + "\n");
  }
}

TEST(BleuCli, ReadmeExampleFromFiles) {
  TempDir t;
  const std::string hyp = t.write("hyp.txt", "The dog bit the man.\nIt wasn't surprising.\nThe man had just bitten him.\n");
  const std::string r0 = t.write("r0.txt", "The dog bit the man.\nIt was not unexpected.\nThe man bit him first.\n");
  const std::string r1 = t.write("r1.txt", "The dog had bit the man.\nNo one was surprised.\nThe man had bitten the dog.");
  const ProcResult r = run_cmd(qkv_command("bleu", {r0, r1}) + " < " + quote(hyp), true);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)\n");
  const ProcResult w = run_cmd(qkv_command("bleu", {r0, r1}, "-w 1 -i " + quote(hyp)), true);
  EXPECT_EQ(w.output, "BLEU = 48.5 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)\n");
}

TEST(BleuCli, MissingReferenceFile) {
  TempDir t;
  const std::string hyp = t.write("hyp.txt", "a b c\n");
  const std::string ref = t.write("ref.txt", "a b c\n");
  const std::string missing = (t.path / "no_such_ref.txt").string();
  const ProcResult r = run_cmd(qkv_command("bleu", {ref, missing}) + " < " + quote(hyp), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("reference file " + missing + " does not exist"), std::string::npos) << r.output;
  const ProcResult h = run_cmd(qkv_command("bleu", {ref}, "-i " + quote((t.path / "no_hyp.txt").string())), true);
  EXPECT_EQ(h.exit_code, 1);
  EXPECT_NE(h.output.find("no_hyp.txt does not exist"), std::string::npos) << h.output;
}

TEST(BleuCli, LineCountMismatch) {
  TempDir t;
  const std::string hyp = t.write("hyp.txt", "a b c\nd e f\ng\n");
  const std::string good = t.write("good.txt", "a b c\nd e f\ng h\n");
  const std::string shorter = t.write("short.txt", "a b c\nd e f\n");
  const ProcResult r = run_cmd(qkv_command("bleu", {good, shorter}) + " < " + quote(hyp), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("the hypotheses (<stdin>) have 3 lines but reference " + shorter + " has 2 lines"),
            std::string::npos)
      << r.output;
  const ProcResult i = run_cmd(qkv_command("bleu", {shorter}, "-i " + quote(hyp)), true);
  EXPECT_EQ(i.exit_code, 1);
  EXPECT_NE(i.output.find("the hypotheses (" + hyp + ") have 3 lines"), std::string::npos) << i.output;
}

TEST(BleuCli, InvalidUtf8NamesFileAndLine) {
  TempDir t;
  const std::string hyp = t.write("hyp.txt", "a b c\nd \xC3\x28 f\n");
  const std::string ref = t.write("ref.txt", "a b c\nd e f\n");
  const std::string bad_ref = t.write("bad_ref.txt", "a b c\n\xFF\n");
  const ProcResult in_hyp = run_cmd(qkv_command("bleu", {ref}) + " < " + quote(hyp), true);
  EXPECT_EQ(in_hyp.exit_code, 1);
  EXPECT_NE(in_hyp.output.find("<stdin>:2: invalid UTF-8 (byte 0xC3 at column 3)"), std::string::npos)
      << in_hyp.output;
  const ProcResult in_file = run_cmd(qkv_command("bleu", {ref}, "-i " + quote(hyp)), true);
  EXPECT_NE(in_file.output.find(hyp + ":2: invalid UTF-8"), std::string::npos) << in_file.output;
  const ProcResult in_ref = run_cmd(qkv_command("bleu", {bad_ref}) + " < " + quote(ref), true);
  EXPECT_EQ(in_ref.exit_code, 1);
  EXPECT_NE(in_ref.output.find(bad_ref + ":2: invalid UTF-8 (byte 0xFF at column 1)"), std::string::npos)
      << in_ref.output;
}

TEST(BleuCli, NeedsAReference) {
  const ProcResult r = run_cmd(quote(QKV_BIN) + " bleu < /dev/null", true);
  EXPECT_NE(r.exit_code, 0);
}
