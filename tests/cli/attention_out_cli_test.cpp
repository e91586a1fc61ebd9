// `qkv translate --attention-out DIR` and `qkv generate --attention-out DIR` through the real
// binary, on small random checkpoints with SentencePiece models: one DIR/NNNN.npz per input line
// (none for an empty line) that NumPy loads without pickle, holding the pieces and the weights of
// the (best) output in shapes that fit each other, every row a softmax; PNG heatmaps beside them;
// the output itself unchanged by capturing; a bad DIR and a python3 that cannot draw are errors
// (exit 1) that say what to do and keep the .npz files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "cli/cli_util.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/sentencepiece.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::kBadInput;


// `env ENV qkv ARGS` with stdout in `out` and stderr in `err`.
CliRun run_env(const std::string& env, const std::string& args) {
  const std::string err = ::testing::TempDir() + "/qkv_attention_err_" + std::to_string(::getpid());
  const std::string cmd = "env " + env + " " + std::string(QKV_BIN) + " " + args + " 2>" + err;
  CliRun r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = qkv::testing::read_file(err);
  fs::remove(err);
  return r;
}

std::string command_output(const std::string& cmd) {
  std::string out;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

// Checks an attention file with NumPy and prints "ok" or what is wrong.
constexpr const char* kCheckScript = R"(
import sys
import numpy as np
path, kind = sys.argv[1], sys.argv[2]
z = np.load(path, allow_pickle=False)
def rows_are_softmax(w):
    assert (w >= 0).all(), "negative weight"
    assert np.allclose(w.sum(-1), 1, atol=1e-5), "rows do not sum to 1"
if kind == "translation":
    assert sorted(z.files) == ["cross_attention", "decoder_input_pieces", "decoder_self_attention",
                               "encoder_self_attention", "source_pieces", "target_pieces"], z.files
    S, T = len(z["source_pieces"]), len(z["target_pieces"])
    assert z["cross_attention"].shape == (2, 4, T, S), z["cross_attention"].shape
    assert z["decoder_self_attention"].shape == (2, 4, T, T)
    assert z["encoder_self_attention"].shape == (2, 4, S, S)
    assert z["target_pieces"][-1] == "</s>" and z["decoder_input_pieces"][0] == "<s>"
    assert list(z["decoder_input_pieces"][1:]) == list(z["target_pieces"][:-1])
    for k in ("cross_attention", "decoder_self_attention", "encoder_self_attention"):
        assert z[k].dtype == np.float32
        rows_are_softmax(z[k])
    assert (np.triu(z["decoder_self_attention"], 1) == 0).all(), "a position attends to a later one"
    print("ok", S, T, " ".join(z["source_pieces"]))
else:
    assert sorted(z.files) == ["pieces", "self_attention"], z.files
    T = len(z["pieces"])
    assert z["self_attention"].shape == (2, 4, T, T), z["self_attention"].shape
    rows_are_softmax(z["self_attention"])
    assert (np.triu(z["self_attention"], 1) == 0).all()
    print("ok", T, " ".join(z["pieces"]))
)";

class AttentionOut : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(qkv::testing::temp_dir("attention_out"));
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
    // A translation checkpoint: random weights, one SentencePiece model for both sides.
    qkv::models::TransformerConfig c;
    c.src_vocab_size = c.tgt_vocab_size = 300;
    c.d_model = 32;
    c.num_heads = 4;
    c.num_layers = 2;
    c.d_ff = 64;
    c.max_seq_length = 40;
    c.dropout = 0.f;
    qkv::models::save_model(path("mt"), qkv::models::Transformer(c, 3));
    qkv::text::train_sentencepiece({path("text.txt")}, path("mt") + "/source.spm", so);
    fs::copy_file(path("mt") + "/source.spm.model", path("mt") + "/target.spm.model");
    // A language model.
    qkv::models::TransformerConfig g = qkv::models::decoder_only_defaults();
    g.src_vocab_size = g.tgt_vocab_size = 300;
    g.d_model = 32;
    g.num_heads = 4;
    g.num_layers = 2;
    g.d_ff = 64;
    g.max_seq_length = 24;
    g.dropout = 0.f;
    qkv::models::save_model(path("lm"), qkv::models::CausalLM(g, 4));
    qkv::text::train_sentencepiece({path("text.txt")}, path("lm") + "/spm", so);
    std::ofstream(path("check.py")) << kCheckScript;
    std::ofstream(path("in.txt")) << "the cat sat on the mat\n\nbirds sing\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string check(const std::string& file, const std::string& kind) {
    return command_output("/usr/bin/python3 " + path("check.py") + " " + file + " " + kind + " 2>&1");
  }
  static std::string* dir_;
};
std::string* AttentionOut::dir_ = nullptr;

TEST_F(AttentionOut, TranslateWritesWeightsAndPicturesPerSentence) {
  const std::string flags = "translate --checkpoint " + path("mt") + " --input " + path("in.txt") + " --threads 1 --beam-size 3";
  const CliRun plain = run_env("-u QKV_PYTHON", flags);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::string out = path("mt_att");
  const CliRun r = run_env("-u QKV_PYTHON", flags + " --attention-out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out) << "capturing attention changed the translations";
  EXPECT_NE(r.err.find("attention of 2 sentence(s) in " + out), std::string::npos) << r.err;
  for (const char* f : {"0001.npz", "0001-cross-layer1.png", "0001-cross-layer2.png", "0003.npz",
                        "0003-cross-layer1.png", "0003-cross-layer2.png"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(out + "/0002.npz")) << "an empty line has no translation to picture";
  EXPECT_EQ(check(out + "/0001.npz", "translation").rfind("ok 6 ", 0), 0u) << check(out + "/0001.npz", "translation");
  EXPECT_EQ(check(out + "/0003.npz", "translation").rfind("ok ", 0), 0u) << check(out + "/0003.npz", "translation");
  // Greedy (beam 1) too.
  const CliRun g = run_env("-u QKV_PYTHON", "translate --checkpoint " + path("mt") + " --input " + path("in.txt") +
                                                " --threads 1 --beam-size 1 --attention-out " + path("mt_greedy"));
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(check(path("mt_greedy") + "/0001.npz", "translation").rfind("ok 6 ", 0), 0u);
}

TEST_F(AttentionOut, GenerateWritesSelfAttentionPerLine) {
  const std::string out = path("lm_att");
  const CliRun r = run_env("-u QKV_PYTHON", "generate --checkpoint " + path("lm") + " --input " + path("in.txt") +
                                                " --max-new-tokens 5 --threads 1 --attention-out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"0001.npz", "0002.npz", "0003.npz", "0001-self-layer1.png", "0003-self-layer2.png"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  const std::string first = check(out + "/0001.npz", "generation");
  EXPECT_EQ(first.rfind("ok ", 0), 0u) << first;
  const CliRun one = run_env("-u QKV_PYTHON", "generate --checkpoint " + path("lm") +
                                                  " --prompt 'the cat' --max-new-tokens 4 --threads 1 --attention-out " +
                                                  path("lm_one"));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(check(path("lm_one") + "/0001.npz", "generation").rfind("ok ", 0), 0u);
  EXPECT_TRUE(fs::exists(path("lm_one") + "/0001-self-layer2.png"));
}

TEST_F(AttentionOut, ErrorsSayWhatToDo) {
  std::ofstream(path("a_file")) << "x";
  CliRun r = run_env("-u QKV_PYTHON", "translate --checkpoint " + path("mt") + " --input " + path("in.txt") +
                                          " --attention-out " + path("a_file"));
  EXPECT_EQ(r.code, kBadInput);
  EXPECT_NE(r.err.find("qkv: error: --attention-out " + path("a_file") + ": exists and is not a directory"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "refused before translating";
  const std::string out = path("no_python");
  r = run_env("QKV_PYTHON=" + path("missing/python3"), "generate --checkpoint " + path("lm") + " --input " +
                                                             path("in.txt") + " --max-new-tokens 3 --attention-out " + out);
  EXPECT_EQ(r.code, kBadInput);
  for (const std::string& part : {std::string("qkv: error: pictures need python3 with matplotlib"),
                                  std::string("apt-get install python3-matplotlib"),
                                  "(the attention weights are written: 3 .npz file(s) in " + out + ")"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " not in " << r.err;
  EXPECT_TRUE(fs::exists(out + "/0003.npz"));
}

}  // namespace
