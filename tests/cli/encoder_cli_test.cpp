// The encoder-only commands through the real binary: `qkv import --from hf` of a BERT, `qkv info`,
// `qkv embed` (JSON lines and .npy, truncation or refusal of long lines), `qkv similar` with its
// embedding cache, and their errors (exit code 1, `qkv: error:` naming the file, line or field).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_util.h"
#include "model/ref_dir.h"
#include "qkv/io/npy.h"

namespace qkv::testing {
namespace {

namespace fs = std::filesystem;

// An encoder-only checkpoint imported from the transformers-built classifier (no tokenizer: --ids).
std::string imported_bert(const std::string& dir) {
  const std::string hf = ref_path("hf_bert_cls");
  if (hf.empty()) return "";
  const CliRun r = run_qkv("import --from hf " + hf + " --output-dir " + dir + "/ckpt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("BERT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("classifier over 3 labels"), std::string::npos) << r.out;
  return dir + "/ckpt";
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(EncoderCli, ImportInfoAndEmbedAsJsonLinesAndNpy) {
  const std::string dir = temp_dir("enc_embed");
  const std::string ckpt = imported_bert(dir);
  if (ckpt.empty()) return;
  CliRun r = run_qkv("info " + ckpt);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("encoder-only"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("classifier over 3 labels (law history wisdom)"), std::string::npos) << r.out;
  write(dir + "/in.txt", "1 5 6 7 2\n8 9\n\n");
  r = run_qkv_split("embed --checkpoint " + ckpt + " --ids --input " + dir + "/in.txt");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const auto v = nlohmann::json::parse(line).get<std::vector<double>>();
    ASSERT_EQ(v.size(), 64u);
    double sq = 0;
    for (double x : v) sq += x * x;
    EXPECT_NEAR(sq, 1.0, 1e-5) << "normalised by default";
  }
  EXPECT_EQ(n, 3) << "one embedding per line, the empty one included";
  r = run_qkv_split("embed --checkpoint " + ckpt + " --ids --input " + dir + "/in.txt -o " + dir + "/e.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("qkv: wrote "), std::string::npos) << r.err;
  const Tensor e = io::read_npy(dir + "/e.npy");
  EXPECT_EQ(e.shape(), (Dims{3, 64}));
  r = run_qkv_split("embed --checkpoint " + ckpt + " --ids --input " + dir + "/in.txt -o " + dir + "/q.npy --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "--quiet: no summary";
  EXPECT_EQ(io::read_npy(dir + "/q.npy").to_vector(), e.to_vector());
}

TEST(EncoderCli, LongLinesAreTruncatedOrRefusedWithTheirLine) {
  const std::string dir = temp_dir("enc_long");
  const std::string ckpt = imported_bert(dir);
  if (ckpt.empty()) return;
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += std::to_string(3 + i) + " ";
  write(dir + "/in.txt", "4 5\n" + long_line + "\n");
  // The position table has 32 rows: truncated by default, refused with --too-long error.
  CliRun r = run_qkv("embed --checkpoint " + ckpt + " --ids --input " + dir + "/in.txt -o " + dir + "/e.npy");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_qkv("embed --checkpoint " + ckpt + " --ids --too-long error --input " + dir + "/in.txt");
  expect_error(r, 1, {dir + "/in.txt:2", "42 tokens", "32"});
  r = run_qkv("embed --checkpoint " + ckpt + " --ids --max-input-length 100 --input " + dir + "/in.txt");
  expect_error(r, 2, {"--max-input-length 100", "32 positions"});
  write(dir + "/bad.txt", "4 5\n4 x 5\n");
  r = run_qkv("embed --checkpoint " + ckpt + " --ids --input " + dir + "/bad.txt");
  expect_error(r, 1, {dir + "/bad.txt:2", "'x'"});
}

TEST(EncoderCli, SimilarFindsTheLineItselfAndReusesItsCache) {
  const std::string dir = temp_dir("enc_similar");
  const std::string ckpt = imported_bert(dir);
  if (ckpt.empty()) return;
  write(dir + "/corpus.txt", "10 11 12\n50 60 70 80\n100 120\n");
  const std::string cmd = "similar --checkpoint " + ckpt + " --ids --corpus " + dir + "/corpus.txt --query '50 60 70 80' --top-k 2";
  CliRun r = run_qkv_split(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "# 50 60 70 80");
  EXPECT_NE(r.out.find("\n1\t1.0000\t2\t50 60 70 80\n"), std::string::npos) << r.out;
  const std::string cache = dir + "/corpus.txt.qkv-embeddings.npy";
  ASSERT_TRUE(fs::exists(cache));
  const auto written = fs::last_write_time(cache);
  const CliRun again = run_qkv_split(cmd);
  EXPECT_EQ(again.out, r.out);
  EXPECT_EQ(fs::last_write_time(cache), written) << "the cache is read, not rewritten";
  write(dir + "/corpus.txt", "50 60 70 80\n10 11 12\n");  // changed: recomputed
  r = run_qkv_split(cmd);
  EXPECT_NE(r.out.find("\n1\t1.0000\t1\t"), std::string::npos) << r.out;
  EXPECT_EQ(io::read_npy(cache).size(0), 2);
}

TEST(EncoderCli, WrongFamilyMissingTokenizerAndBadImportsAreNamed) {
  const std::string dir = temp_dir("enc_errors");
  const std::string ckpt = imported_bert(dir);
  if (ckpt.empty()) return;
  write(dir + "/in.txt", "hello\n");
  expect_error(run_qkv("embed --checkpoint " + ckpt + " --input " + dir + "/in.txt"), 1, {"no tokenizer", "--ids"});
  // A tokenizer put into the checkpoint by hand that does not fit the embedding.
  fs::copy(ref_path("hf_bert_cls"), dir + "/with_tok");
  ASSERT_EQ(run_qkv("import --from hf " + dir + "/with_tok --output-dir " + dir + "/ckpt_tok").code, 0);
  fs::copy_file(ref_path("minilm/all-MiniLM-L6-v2/tokenizer.json"), dir + "/ckpt_tok/tokenizer.json");
  expect_error(run_qkv("embed --checkpoint " + dir + "/ckpt_tok --input " + dir + "/in.txt"), 1,
               {"tokenizer.json", "30522 tokens", "200 rows"});
  expect_error(run_qkv("score --checkpoint " + ckpt + " --tgt " + dir + "/in.txt"), 1, {"encoder-only", "qkv embed"});
  const std::string gpt = ref_path("hf_gpt2");
  if (!gpt.empty()) {
    ASSERT_EQ(run_qkv("import --from hf " + gpt + " --output-dir " + dir + "/gpt").code, 0);
    expect_error(run_qkv("embed --checkpoint " + dir + "/gpt --ids --input " + dir + "/in.txt"), 1,
                 {"decoder-only checkpoint", "embedding needs an encoder-only model"});
  }
  // A tokenizer.json whose vocabulary does not fit the embedding rows, and an unsupported option.
  const std::string hf = dir + "/hf";
  fs::copy(ref_path("hf_bert_cls"), hf);
  write(hf + "/tokenizer.json",
        R"({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3}}})");
  expect_error(run_qkv("import --from hf " + hf + " --output-dir " + dir + "/x"), 1, {"4 tokens", "200 rows"});
  fs::remove(hf + "/tokenizer.json");
  std::ifstream in(hf + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["position_embedding_type"] = "relative_key";
  write(hf + "/config.json", config.dump());
  expect_error(run_qkv("import --from hf " + hf + " --output-dir " + dir + "/x"), 1,
               {hf + "/config.json", "\"position_embedding_type\"", "relative_key"});
  EXPECT_FALSE(fs::exists(dir + "/x")) << "nothing is written when the import fails";
}

}  // namespace
}  // namespace qkv::testing
