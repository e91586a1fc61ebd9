// Corpus chrF against sacreBLEU (tests/python/make_bleu_refs.py writes the cases BLEU uses too) and
// `qkv chrf` run as a process (printed line, JSON, error messages).
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
#include "qkv/eval/chrf.h"
#include "qkv/eval/tokenizer_13a.h"

#include "eval/eval_test_util.h"

using namespace qkv_eval_test;

// ------------------------------------------------------------------------- without reference data

TEST(Chrf, ReadmeExample) {
  // sacreBLEU's README: CHRF().corpus_score(sys, refs) -> chrF2 = 59.73.
  const std::vector<std::string> hyps = {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."};
  const std::vector<std::vector<std::string>> refs = {
      {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
      {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};
  const qkv::eval::ChrfScore s = qkv::eval::corpus_chrf(hyps, refs);
  EXPECT_EQ(s.format(), "chrF2 = 59.73");
  EXPECT_EQ(s.format(1), "chrF2 = 59.7");
}

TEST(Chrf, StatisticsAndEdgeCases) {
  using namespace qkv::eval;
  // Whitespace (Python's notion) is removed before counting: "a b" has the bigram "ab".
  const ChrfStats st = chrf_segment_stats("a b\xC2\xA0" "c", {"abc"});
  EXPECT_EQ(st.v[0], 3);  // hyp unigrams
  EXPECT_EQ(st.v[3], 2);  // hyp bigrams
  EXPECT_EQ(st.v[5], 2);  // matched bigrams
  EXPECT_EQ(st.v[9], 0);  // no 4-gram in the reference: hypothesis count is 0 as well
  EXPECT_DOUBLE_EQ(chrf_f_score(st), 100.0);
  // Code points, not bytes: "é" is one character.
  EXPECT_EQ(chrf_segment_stats("\xC3\xA9\xC3\xA9", {"\xC3\xA9"}).v[0], 2);
  // The best reference by sentence F-score wins.
  const ChrfStats best = chrf_segment_stats("hello", {"xyz", "hello"});
  EXPECT_DOUBLE_EQ(chrf_f_score(best), 100.0);
  EXPECT_EQ(corpus_chrf({"", ""}, {{"", ""}}).format(), "chrF2 = 0.00");
  EXPECT_EQ(corpus_chrf({}, {{}}).format(), "chrF2 = 0.00");
  EXPECT_THROW(corpus_chrf({"a"}, {{"a", "b"}}), qkv::Error);
}

// ---------------------------------------------------------------------------- against sacreBLEU

TEST(ChrfRefs, CorpusMatchesSacrebleu) {
  const auto cases = load_cases();
  const std::string version =
      cases.empty() ? "" : load_json(qkv::testing::ref_path("bleu/cases.json"))["sacrebleu_version"].get<std::string>();
  for (const RefCase& c : cases) {
    SCOPED_TRACE("case " + c.name);
    const auto hyps = qkv::eval::read_text_lines(c.dir + "/hyp.txt");
    std::vector<std::vector<std::string>> refs;
    for (const auto& f : c.ref_files) refs.push_back(qkv::eval::read_text_lines(f));
    const json& e = c.expected["chrf"];
    const qkv::eval::ChrfScore s = qkv::eval::corpus_chrf(hyps, refs);
    expect_close(s.score, e["score"].get<double>(), "score");
    EXPECT_EQ(s.format(), e["line"].get<std::string>());
    EXPECT_EQ(s.format_json(static_cast<int>(refs.size()), 1), with_our_version(e["json"].get<std::string>(), version));
    const qkv::eval::ChrfScore eps = qkv::eval::corpus_chrf(hyps, refs, /*eps_smoothing=*/true);
    expect_close(eps.score, e["eps_score"].get<double>(), "eps score");
    EXPECT_EQ(eps.format(), e["eps_line"].get<std::string>());
  }
}

// -------------------------------------------------------------------------------------- the CLI

TEST(ChrfCli, PrintsSacrebleusLineForEveryCase) {
  const auto cases = load_cases();
  const std::string version =
      cases.empty() ? "" : load_json(qkv::testing::ref_path("bleu/cases.json"))["sacrebleu_version"].get<std::string>();
  for (const RefCase& c : cases) {
    SCOPED_TRACE("case " + c.name);
    const std::string hyp = c.dir + "/hyp.txt";
    const ProcResult line = run_cmd(qkv_command("chrf", c.ref_files) + " < " + quote(hyp), false);
    EXPECT_EQ(line.exit_code, 0);
    EXPECT_EQ(line.output, c.expected["chrf"]["line"].get<std::string>() + "\n");
    const ProcResult eps = run_cmd(qkv_command("chrf", c.ref_files, "--eps-smoothing -i " + quote(hyp)), false);
    EXPECT_EQ(eps.output, c.expected["chrf"]["eps_line"].get<std::string>() + "\n");
    const ProcResult js = run_cmd(qkv_command("chrf", c.ref_files, "--json -w 1") + " < " + quote(hyp), false);
    EXPECT_EQ(js.exit_code, 0);
    EXPECT_EQ(js.output, with_our_version(c.expected["chrf"]["json"].get<std::string>(), version) + "\n");
  }
}

TEST(ChrfCli, ErrorsNameTheFile) {
  TempDir t;
  const std::string hyp = t.write("hyp.txt", "a b c\nd e f\n");
  const std::string ref = t.write("ref.txt", "a b c\nd e f\n");
  const std::string shorter = t.write("short.txt", "a b c\n");
  const std::string bad = t.write("bad.txt", "a b c\nd e \xE2\x82\n");
  const std::string missing = (t.path / "missing.txt").string();

  const ProcResult ok = run_cmd(qkv_command("chrf", {ref}) + " < " + quote(hyp), true);
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.output, "chrF2 = 100.00\n");

  const ProcResult m = run_cmd(qkv_command("chrf", {ref, missing}) + " < " + quote(hyp), true);
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.output.find("reference file " + missing + " does not exist"), std::string::npos) << m.output;

  const ProcResult n = run_cmd(qkv_command("chrf", {shorter}) + " < " + quote(hyp), true);
  EXPECT_EQ(n.exit_code, 1);
  EXPECT_NE(n.output.find("the hypotheses (<stdin>) have 2 lines but reference " + shorter + " has 1 lines"),
            std::string::npos)
      << n.output;

  const ProcResult u = run_cmd(qkv_command("chrf", {ref}) + " < " + quote(bad), true);
  EXPECT_EQ(u.exit_code, 1);
  EXPECT_NE(u.output.find("<stdin>:2: invalid UTF-8 (byte 0xE2 at column 5)"), std::string::npos) << u.output;
  const ProcResult ur = run_cmd(qkv_command("chrf", {bad}) + " < " + quote(hyp), true);
  EXPECT_EQ(ur.exit_code, 1);
  EXPECT_NE(ur.output.find(bad + ":2: invalid UTF-8"), std::string::npos) << ur.output;
}
