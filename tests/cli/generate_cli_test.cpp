// `qkv generate` through the real binary, on small random decoder-only checkpoints written by the
// test (one for ids, one with an spm.model for text): every bad flag is a usage error (exit 2)
// naming it; an encoder-decoder checkpoint, ids outside the vocabulary and prompts that fill the
// context are bad input (exit 1) naming what and where; the output is what decoding::generate
// gives for the same model (ids round trip); --input gives one line per input line; a line's
// output depends on --seed and its line number only, not on --batch-size or --threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "qkv/decoding/generate.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/sentencepiece.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::kBadInput;
using qkv::testing::kUsage;
using qkv::testing::run_qkv_split;
using Tokens = std::vector<int32_t>;


qkv::models::TransformerConfig lm_config(int64_t vocab) {
  qkv::models::TransformerConfig c = qkv::models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 24;
  c.dropout = 0.f;
  return c;
}

class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(qkv::testing::temp_dir("generate"));
    qkv::models::save_model(path("lm"), qkv::models::CausalLM(lm_config(40), 7));
    // A text model: a SentencePiece model of 300 pieces (256 of them bytes) and a model of that size.
    std::ofstream text(path("text.txt"));
    const char* words[] = {"the", "cat", "sat", "on", "mat", "and", "dog", "ran", "far", "away", "under", "green",
                           "tree", "while", "birds", "sing", "over", "quiet", "river", "bank"};
    for (int i = 0; i < 400; ++i) {
      for (int j = 0; j < 8; ++j) text << (j ? " " : "") << words[(i * 7 + j * 3 + i / 20) % 20];
      text << "\n";
    }
    text.close();
    qkv::text::SpmTrainOptions so;
    so.vocab_size = 300;
    qkv::models::save_model(path("text_lm"), qkv::models::CausalLM(lm_config(300), 8));
    qkv::text::train_sentencepiece({path("text.txt")}, path("text_lm") + "/spm", so);
    std::ofstream(path("ed.json")) << R"({"src_vocab_size": 16, "tgt_vocab_size": 16, "d_model": 16,
        "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 16})";
    const CliRun r = run_qkv_split("init --config " + path("ed.json") + " --output-dir " + path("seq2seq"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string lm() { return "generate --checkpoint " + path("lm") + " --threads 1 "; }
  static std::string* dir_;
};
std::string* GenerateCli::dir_ = nullptr;

Tokens parse(const std::string& line) {
  Tokens ids;
  std::istringstream in(line);
  int32_t v = 0;
  while (in >> v) ids.push_back(v);
  return ids;
}

// `qkv init` builds the family config.json names (it used to build an encoder-decoder model from
// any config and refuse the others).
TEST_F(GenerateCli, InitWritesACheckpointOfTheFamilyTheConfigNames) {
  std::ofstream(path("gpt.json")) << R"({"architecture": "decoder-only", "vocab_size": 20, "d_model": 16,
      "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 16})";
  std::ofstream(path("bert.json")) << R"({"architecture": "encoder-only", "vocab_size": 20, "d_model": 16,
      "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 16})";
  for (const std::string family : {"gpt", "bert"}) {
    const CliRun init = run_qkv_split("init --config " + path(family + ".json") + " --output-dir " + path("init_" + family));
    ASSERT_EQ(init.code, 0) << init.err;
    const CliRun info = run_qkv_split("info " + path("init_" + family));
    ASSERT_EQ(info.code, 0) << info.err;
    EXPECT_NE(info.out.find(family == "gpt" ? "decoder-only" : "encoder-only"), std::string::npos) << info.out;
  }
  std::ofstream(path("init_prompt.ids")) << "1 5 7\n";
  const CliRun gen = run_qkv_split("generate --checkpoint " + path("init_gpt") + " --ids --input " +
                                   path("init_prompt.ids") + " --max-new-tokens 3 --threads 1");
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_LE(parse(gen.out).size(), 3u) << gen.out;  // at most 3 new tokens (fewer if EOS comes first)
}


using qkv::testing::lines_of;

void expect_error(const CliRun& r, int code, const std::string& needle) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(GenerateCli, BadFlagsAreUsageErrors) {
  const std::string p = lm() + "--ids --prompt 2 --max-new-tokens 3 ";
  expect_error(run_qkv_split(p + "--do-sample --temperature 0"), kUsage, "--temperature");
  expect_error(run_qkv_split(p + "--do-sample --temperature -0.5"), kUsage, "--temperature");
  expect_error(run_qkv_split(p + "--do-sample --top-p 0"), kUsage, "--top-p");
  expect_error(run_qkv_split(p + "--do-sample --top-p 1.5"), kUsage, "--top-p");
  expect_error(run_qkv_split(p + "--do-sample --top-p nan"), kUsage, "--top-p");
  expect_error(run_qkv_split(p + "--do-sample --top-k -1"), kUsage, "--top-k");
  expect_error(run_qkv_split(p + "--do-sample --top-k 2.5"), kUsage, "--top-k");
  expect_error(run_qkv_split(p + "--top-k 5"), kUsage, "--top-k applies only with --do-sample");
  expect_error(run_qkv_split(p + "--top-p 0.9"), kUsage, "--top-p applies only with --do-sample");
  expect_error(run_qkv_split(p + "--temperature 0.7"), kUsage, "--temperature applies only with --do-sample");
  expect_error(run_qkv_split(p + "--seed 3"), kUsage, "--seed applies only with --do-sample");
  expect_error(run_qkv_split(p + "--input " + path("ids.txt")), kUsage, "--prompt and --input");
  expect_error(run_qkv_split(lm() + "--ids --max-new-tokens 3"), kUsage, "--prompt TEXT or --input FILE");
  expect_error(run_qkv_split(lm() + "--ids --prompt 2 --max-new-tokens 0"), kUsage, "--max-new-tokens");
  expect_error(run_qkv_split(lm() + "--ids --prompt 2"), kUsage, "--max-new-tokens");
  expect_error(run_qkv_split(p + "--batch-size 0"), kUsage, "--batch-size");
  const CliRun r = run_qkv_split(p + "--top-k 5");
  EXPECT_NE(r.err.find("Run 'qkv generate --help' for usage."), std::string::npos) << r.err;
}

TEST_F(GenerateCli, BadInputNamesWhatAndWhere) {
  CliRun r = run_qkv_split("generate --checkpoint " + path("seq2seq") + " --ids --prompt 2 --max-new-tokens 3");
  expect_error(r, kBadInput, "encoder-decoder");
  EXPECT_NE(r.err.find("decoder-only"), std::string::npos) << r.err;
  std::ofstream(path("bad_ids.txt")) << "2 5 6\n2 40 7\n";
  expect_error(run_qkv_split(lm() + "--ids --max-new-tokens 3 --input " + path("bad_ids.txt")), kBadInput,
               "bad_ids.txt:2: '40' is not a token id in [0, 40)");
  expect_error(run_qkv_split(lm() + "--ids --max-new-tokens 3 --prompt '2 -1'"), kBadInput,
               "--prompt: '-1' is not a token id in [0, 40)");
  // No spm.model: text needs --ids.
  expect_error(run_qkv_split(lm() + "--max-new-tokens 3 --prompt hello"), kBadInput, "use --ids");
  // 24 ids fill the context (max_seq_length 24): refused, or cut with --truncate-prompt.
  std::string full;
  for (int i = 0; i < 24; ++i) full += std::to_string(4 + i) + " ";
  std::ofstream(path("long.txt")) << "2 5\n" << full << "\n";
  r = run_qkv_split(lm() + "--ids --max-new-tokens 3 --input " + path("long.txt"));
  expect_error(r, kBadInput, "long.txt:2: a prompt of 24 tokens leaves no room");
  EXPECT_NE(r.err.find("--truncate-prompt"), std::string::npos) << r.err;
  r = run_qkv_split(lm() + "--ids --max-new-tokens 3 --truncate-prompt --input " + path("long.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 2u) << r.out;
  EXPECT_NE(r.err.find("1 prompt(s) cut to their last tokens"), std::string::npos) << r.err;
}

TEST_F(GenerateCli, IdsRoundTrip) {
  // The CLI's tokens are decoding::generate's for the same checkpoint (greedy, EOS stops).
  const auto model = qkv::models::load_causal_lm(path("lm"));
  model->eval();
  qkv::decoding::GenerateOptions o;
  o.max_new_tokens = 8;
  const Tokens prompt = {2, 9, 10, 11};
  const Tokens expected = qkv::decoding::generate(*model, {prompt}, {}, o)[0];
  CliRun r = run_qkv_split(lm() + "--ids --max-new-tokens 8 --prompt '2 9 10 11'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string joined;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i) joined += ' ';
    joined += std::to_string(expected[i]);
  }
  EXPECT_EQ(r.out, joined + "\n");
  // Fed back: the prompt plus the first k new tokens continues with the rest.
  const Tokens out = parse(r.out);
  ASSERT_GE(out.size(), 3u);
  std::string fed = "2 9 10 11 " + std::to_string(out[0]) + " " + std::to_string(out[1]);
  r = run_qkv_split(lm() + "--ids --max-new-tokens " + std::to_string(out.size() - 2) + " --prompt '" + fed + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse(r.out), Tokens(out.begin() + 2, out.end()));
  // An empty --ids prompt starts from BOS.
  r = run_qkv_split(lm() + "--ids --max-new-tokens 5 --prompt ''");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse(r.out), qkv::decoding::generate(*model, {{model->config().bos_id}}, {}, [] {
              qkv::decoding::GenerateOptions g;
              g.max_new_tokens = 5;
              return g;
            }())[0]);
}

TEST_F(GenerateCli, InputLinesSeedsAndBatches) {
  std::ofstream(path("ids.txt")) << "2 5 6 7\n\n2 30 31 32 33 34 35 36 37\n";
  const std::string sample = "generate --checkpoint " + path("lm") +
                             " --ids --max-new-tokens 10 --do-sample --temperature 2 --top-k 30 --top-p 0.95 ";
  const CliRun a = run_qkv_split(sample + "--seed 11 --threads 1 --input " + path("ids.txt"));
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(lines_of(a.out).size(), 3u) << a.out;
  EXPECT_NE(a.err.find("qkv generate: 3 line(s)"), std::string::npos) << a.err;
  // Same seed, same output, whatever the batch size and thread count.
  EXPECT_EQ(run_qkv_split(sample + "--seed 11 --threads 1 --input " + path("ids.txt")).out, a.out);
  EXPECT_EQ(run_qkv_split(sample + "--seed 11 --threads 1 --batch-size 1 --input " + path("ids.txt")).out, a.out);
  EXPECT_EQ(run_qkv_split(sample + "--seed 11 --threads 2 --batch-size 2 --input " + path("ids.txt")).out, a.out);
  EXPECT_NE(run_qkv_split(sample + "--seed 12 --threads 1 --input " + path("ids.txt")).out, a.out);
  // --prompt is line 0: the same draws as the first line of --input.
  const CliRun single = run_qkv_split(sample + "--seed 11 --threads 1 --prompt '2 5 6 7'");
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_EQ(single.out, lines_of(a.out)[0] + "\n");
  // stdin works as a file.
  const CliRun piped = qkv::testing::run_shell(sample + "--seed 11 --threads 1 --quiet --input - < " + path("ids.txt"), "2>/dev/null");
  EXPECT_EQ(piped.out, a.out);
  // -o FILE holds what stdout would, for --input and for a streamed --prompt; nothing goes to stdout.
  const CliRun to_file = run_qkv_split(sample + "--seed 11 --threads 1 --input " + path("ids.txt") + " -o " + path("gen.txt"));
  ASSERT_EQ(to_file.code, 0) << to_file.err;
  EXPECT_EQ(to_file.out, "");
  EXPECT_EQ(qkv::testing::read_file(path("gen.txt")), a.out);
  const CliRun streamed = run_qkv_split(sample + "--seed 11 --threads 1 --prompt '2 5 6 7' --output " + path("one.txt"));
  ASSERT_EQ(streamed.code, 0) << streamed.err;
  EXPECT_EQ(qkv::testing::read_file(path("one.txt")), single.out);
  // The input as the output would be emptied before it is read: refused.
  const CliRun same = run_qkv_split(sample + "--seed 11 --input " + path("ids.txt") + " -o " + path("ids.txt"));
  EXPECT_EQ(same.code, 2) << same.err;
}

TEST_F(GenerateCli, TextPromptsAndLines) {
  const std::string t = "generate --checkpoint " + path("text_lm") + " --threads 1 --max-new-tokens 6 ";
  std::ofstream(path("text_in.txt")) << "the cat\n\nthe dog ran\n";
  const CliRun lines = run_qkv_split(t + "--input " + path("text_in.txt") + " --quiet");
  ASSERT_EQ(lines.code, 0) << lines.err;
  EXPECT_EQ(lines.err, "");
  ASSERT_EQ(lines_of(lines.out).size(), 3u) << lines.out;
  // Streamed text of --prompt is the text of the same prompt as an --input line.
  const CliRun streamed = run_qkv_split(t + "--prompt 'the cat' --quiet");
  ASSERT_EQ(streamed.code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, lines_of(lines.out)[0] + "\n");
  // Text prompts are BOS + the SentencePiece ids: the same tokens as --ids with them.
  const qkv::text::SentencePiece spm(path("text_lm") + "/spm.model");
  std::string ids = "2";
  for (int32_t id : spm.encode("the dog ran")) {
    ids += ' ';
    ids += std::to_string(id);
  }
  const CliRun as_ids = run_qkv_split(t + "--ids --quiet --prompt '" + ids + "'");
  ASSERT_EQ(as_ids.code, 0) << as_ids.err;
  EXPECT_EQ(spm.decode(parse(as_ids.out)), lines_of(lines.out)[2]);
}

}  // namespace
