// The search flags every family shares, through the real binary: `qkv generate --beam-size` (what
// decoding::generate_hypotheses gives, n-best lines), `qkv translate --do-sample` (deterministic by
// --seed, --top-k 1 = greedy), the token rules on both, and bad flags refused naming the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "decoding/small_causal_lm.h"
#include "qkv/decoding/generate.h"
#include "qkv/models/checkpoint.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::kUsage;
using qkv::testing::run_qkv_split;


class SearchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(qkv::testing::temp_dir("search_cli"));
    qkv::models::save_model(path("lm"), *qkv::testing::small_model());
    std::ofstream(path("ed.json")) << R"({"src_vocab_size": 24, "tgt_vocab_size": 24, "d_model": 16,
        "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 32})";
    const CliRun r = run_qkv_split("init --config " + path("ed.json") + " --output-dir " + path("seq2seq") + " --seed 3");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ofstream(path("prompts.ids")) << "1 5 6\n1\n1 7 8 9 10\n";
    std::ofstream(path("sources.ids")) << "5 6 7 8 2\n9 10 2\n11 12 13 14 15 16 2\n17 2\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string generate(const std::string& flags) {
    return "generate --checkpoint " + path("lm") + " --ids --input " + path("prompts.ids") +
           " --max-new-tokens 8 --threads 1 --quiet " + flags;
  }
  static std::string translate(const std::string& flags) {
    return "translate --checkpoint " + path("seq2seq") + " --ids --input " + path("sources.ids") +
           " --threads 1 --quiet " + flags;
  }
  static std::string* dir_;
};
std::string* SearchCli::dir_ = nullptr;

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

TEST_F(SearchCli, GenerateBeamSizeWritesWhatTheLibraryFinds) {
  const auto model = qkv::testing::small_model();
  qkv::decoding::GenerateOptions o;
  o.max_new_tokens = 8;
  o.beam_size = 4;
  o.num_hypotheses = 2;
  o.length_penalty = 0.5f;
  o.constraints.no_repeat_ngram_size = 2;
  const auto want = qkv::decoding::generate_hypotheses(*model, {{1, 5, 6}, {1}, {1, 7, 8, 9, 10}}, o);
  std::string best;
  for (const auto& found : want) best += ids_line(found[0].tokens) + "\n";
  const CliRun nbest = run_qkv_split(generate("--beam-size 4 --num-hypotheses 2 --length-penalty 0.5 --no-repeat-ngram-size 2"));
  ASSERT_EQ(nbest.code, 0) << nbest.err;
  // "index ||| ids ||| log-prob ||| score": the tokens exactly, the scores to rounding (the saved
  // checkpoint computes in its own layout).
  std::istringstream lines(nbest.out);
  std::string line;
  for (size_t i = 0; i < want.size(); ++i)
    for (const auto& h : want[i]) {
      ASSERT_TRUE(std::getline(lines, line)) << nbest.out;
      const std::string head = std::to_string(i) + " ||| " + ids_line(h.tokens) + " ||| ";
      ASSERT_EQ(line.substr(0, head.size()), head) << nbest.out;
      double log_prob = 0, score = 0;
      ASSERT_EQ(std::sscanf(line.c_str() + head.size(), "%lf ||| %lf", &log_prob, &score), 2) << line;
      EXPECT_NEAR(log_prob, h.log_prob, 1e-4) << line;
      EXPECT_NEAR(score, h.score, 1e-4) << line;
    }
  EXPECT_FALSE(std::getline(lines, line)) << nbest.out;
  const CliRun one = run_qkv_split(generate("--beam-size 4 --length-penalty 0.5 --no-repeat-ngram-size 2"));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.out, best);
  // --prompt with a beam: the best continuation, written at the end.
  const CliRun single = run_qkv_split("generate --checkpoint " + path("lm") +
                                      " --ids --prompt '1 5 6' --max-new-tokens 8 --quiet --beam-size 4 "
                                      "--length-penalty 0.5 --no-repeat-ngram-size 2");
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_EQ(single.out, ids_line(want[0][0].tokens) + "\n");
}

TEST_F(SearchCli, GenerateRulesChangeTheOutput) {
  const CliRun plain = run_qkv_split(generate(""));
  ASSERT_EQ(plain.code, 0) << plain.err;
  // (--min-new-tokens: against transformers in search_rules_test.cpp; this model's outputs hold no EOS.)
  for (const std::string rule : {"--repetition-penalty 3", "--no-repeat-ngram-size 1", "--no-repeat-ngram-size 2"}) {
    const CliRun ruled = run_qkv_split(generate(rule));
    ASSERT_EQ(ruled.code, 0) << rule << ": " << ruled.err;
    EXPECT_NE(ruled.out, plain.out) << rule;
  }
}

TEST_F(SearchCli, TranslateDoSampleIsDeterministicBySeedAndTopK1IsGreedy) {
  const CliRun a = run_qkv_split(translate("--do-sample --seed 5"));
  ASSERT_EQ(a.code, 0) << a.err;
  const CliRun b = run_qkv_split(translate("--do-sample --seed 5 --batch-size 1"));
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out) << "a sentence's draws depend on its batch";
  const CliRun c = run_qkv_split(translate("--do-sample --seed 6"));
  EXPECT_NE(a.out, c.out) << "--seed has no effect";
  const CliRun top1 = run_qkv_split(translate("--do-sample --seed 6 --top-k 1"));
  const CliRun greedy = run_qkv_split(translate("--beam-size 1"));
  ASSERT_EQ(top1.code, 0) << top1.err;
  EXPECT_EQ(top1.out, greedy.out);
  const CliRun rule = run_qkv_split(translate("--no-repeat-ngram-size 1 --min-length 6"));
  ASSERT_EQ(rule.code, 0) << rule.err;
  std::istringstream lines(rule.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int> seen;
    for (int id; ids >> id;) {
      EXPECT_EQ(std::count(seen.begin(), seen.end(), id), 0) << "a repeated token in " << line;
      seen.push_back(id);
    }
    EXPECT_GE(seen.size(), 5u) << line;
  }
}

TEST_F(SearchCli, BadSearchFlagsAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {translate("--do-sample --beam-size 4"), "--do-sample"},
      {translate("--do-sample --num-hypotheses 2"), "--do-sample"},
      {translate("--temperature 0.5"), "--temperature"},
      {translate("--seed 3"), "--seed"},
      {translate("--do-sample --top-p 0"), "--top-p"},
      {translate("--repetition-penalty 0"), "--repetition-penalty"},
      {translate("--no-repeat-ngram-size -1"), "--no-repeat-ngram-size"},
      {translate("--min-length -1"), "--min-length"},
      {generate("--beam-size 2 --do-sample"), "--do-sample"},
      {generate("--beam-size 2 --ignore-eos"), "--ignore-eos"},
      {generate("--beam-size 2 --num-hypotheses 3"), "--num-hypotheses"},
      {generate("--beam-size 0"), "--beam-size"},
      {generate("--beam-size 41"), "--beam-size"},
      {generate("--beam-size 2 --attention-out " + path("att")), "--attention-out"},
      {generate("--repetition-penalty nan"), "--repetition-penalty"},
      {generate("--min-new-tokens -2"), "--min-new-tokens"},
      {generate("--length-penalty -1"), "--length-penalty"},
  };
  for (const auto& [args, flag] : cases) {
    const CliRun r = run_qkv_split(args);
    EXPECT_EQ(r.code, kUsage) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("qkv: error"), std::string::npos) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << "\n" << r.err;
  }
}

}  // namespace
