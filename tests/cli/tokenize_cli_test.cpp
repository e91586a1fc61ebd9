// `qkv tokenize` through the real binary: the ids and tokens `tokenizers` gives (with [CLS]/[SEP]),
// --no-special-tokens, a checkpoint's tokenizer, stdin, and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_util.h"
#include "model/ref_dir.h"
#include "qkv/text/wordpiece.h"

namespace qkv::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A line of ids without its first and last id ([CLS] and [SEP]).
std::string without_ends(const std::string& line) {
  const size_t first = line.find(' '), last = line.rfind(' ');
  return first == last ? "" : line.substr(first + 1, last - first - 1);
}

TEST(TokenizeCli, IdsAndPiecesEqualTokenizers) {
  const std::string tok = ref_path("wordpiece/lower.json"), input = ref_path("wordpiece/cli_input.txt");
  if (tok.empty()) return;
  CliRun r = run_qkv_split("tokenize --tokenizer " + tok + " --input " + input);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string want = read_file(ref_path("wordpiece/cli_ids.txt"));
  EXPECT_GT(split_lines(want).size(), 500u);
  EXPECT_TRUE(r.out == want) << "the ids differ from tokenizers'";
  r = run_qkv_split("tokenize --tokenizer " + tok + " --input " + input + " --pieces");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out == read_file(ref_path("wordpiece/cli_pieces.txt"))) << "the tokens differ from tokenizers'";
  r = run_qkv_split("tokenize --tokenizer " + tok + " --input " + input + " --no-special-tokens");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> got = split_lines(r.out), with_special = split_lines(want);
  ASSERT_EQ(got.size(), with_special.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], without_ends(with_special[i])) << "line " << i + 1;
}

TEST(TokenizeCli, CheckpointTokenizerAndStdin) {
  const std::string tok = ref_path("wordpiece/lower.json");
  if (tok.empty()) return;
  const std::string dir = temp_dir("tokenize_ckpt");
  fs::copy_file(tok, dir + "/tokenizer.json");
  std::ofstream(dir + "/in.txt") << "Hello [MASK] world\n";
  const CliRun r = run_shell("tokenize --checkpoint " + dir, "< " + dir + "/in.txt 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const CliRun pieces = run_shell("tokenize --checkpoint " + dir + " --pieces", "< " + dir + "/in.txt 2>&1");
  const text::WordPiece wp = text::WordPiece::load(tok);
  std::string want;
  for (const int32_t id : wp.with_special_tokens(wp.encode("Hello [MASK] world"))) want += wp.id_to_token(id) + " ";
  want.back() = '\n';
  EXPECT_EQ(pieces.out, want);
  EXPECT_EQ(pieces.out.rfind("[CLS] ", 0), 0u) << pieces.out;
  EXPECT_NE(pieces.out.find(" [MASK] "), std::string::npos) << pieces.out;
  EXPECT_EQ(split_lines(r.out).size(), 1u);
}

TEST(TokenizeCli, Errors) {
  const std::string dir = temp_dir("tokenize_errors");
  CliRun r = run_qkv("tokenize --checkpoint " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error: " + dir + ": no tokenizer (tokenizer.json, spm.model or source.spm.model)"),
            std::string::npos) << r.out;
  r = run_qkv("tokenize --checkpoint " + dir + " --tokenizer x.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("give one of them"), std::string::npos) << r.out;
  r = run_qkv("tokenize");
  EXPECT_EQ(r.code, 2) << r.out;
  std::ofstream(dir + "/unigram.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  r = run_qkv("tokenize --tokenizer " + dir + "/unigram.json < /dev/null");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error: " + dir + "/unigram.json: model.type \"Unigram\" is not supported (qkv reads "
                       "byte-level BPE and WordPiece)"),
            std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv::testing
