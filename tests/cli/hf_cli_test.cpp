// `qkv import --from hf` and `qkv export --to hf` through the real binary: exit codes and messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_util.h"
#include "model/ref_dir.h"
#include "qkv/text/byte_level_bpe.h"

namespace qkv::testing {
namespace {

namespace fs = std::filesystem;

TEST(HfCli, ImportsExportsAndImportsAgain) {
  const std::string hf = ref_path("hf_gpt2");
  if (hf.empty()) return;
  const std::string dir = temp_dir("hf_roundtrip");
  CliRun r = run_qkv("import --from hf " + hf + " --output-dir " + dir + "/ckpt");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + dir + "/ckpt: GPT-2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
  for (const char* f : {"config.json", "model.safetensors", "manifest.json", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(dir + "/ckpt/" + f)) << f;
  r = run_qkv("info " + dir + "/ckpt");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_qkv("export --to hf " + dir + "/ckpt --output-dir " + dir + "/hf");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("GPT2LMHeadModel"), std::string::npos) << r.out;
  r = run_qkv("import --from hf " + dir + "/hf --output-dir " + dir + "/ckpt2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_file(dir + "/ckpt/model.safetensors"), read_file(dir + "/ckpt2/model.safetensors"));
  // F16 weights are widened and say so.
  r = run_qkv("import --from hf " + ref_path("hf_gpt2_f16") + " --output-dir " + dir + "/ckpt16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("F16 widened to F32"), std::string::npos) << r.out;
}

// An imported model generates from text with its tokenizer.json: the text output equals the ids
// output (BOS + the BPE ids of the prompt) decoded by the same tokenizer.
TEST(HfCli, ImportedModelGeneratesFromTextWithItsTokenizer) {
  const std::string hf = ref_path("hf_gpt2");
  if (hf.empty()) return;
  const std::string dir = temp_dir("hf_generate");
  ASSERT_EQ(run_qkv("import --from hf " + hf + " --output-dir " + dir + "/ckpt").code, 0);
  const text::ByteLevelBpe bpe = text::ByteLevelBpe::load(dir + "/ckpt/tokenizer.json");
  const std::string prompt = "In the beginning God created";
  std::string ids = "50";  // placeholder, replaced by BOS below
  const CliRun info = run_qkv("info --json " + dir + "/ckpt");
  const size_t at = info.out.find("\"bos_id\": ");
  ASSERT_NE(at, std::string::npos) << info.out;
  ids = std::to_string(std::stoi(info.out.substr(at + 10)));
  for (int32_t id : bpe.encode(prompt)) ids.append(" ").append(std::to_string(id));  // (GCC 12 -Wrestrict on " " + s)
  std::ofstream(dir + "/ids.txt") << ids << "\n";
  const CliRun by_ids = run_qkv_split("generate --checkpoint " + dir + "/ckpt --ids --input " + dir +
                                     "/ids.txt --max-new-tokens 8 --quiet");
  ASSERT_EQ(by_ids.code, 0) << by_ids.err;
  std::vector<int32_t> new_ids;
  std::istringstream in(by_ids.out);
  for (int32_t id; in >> id;) new_ids.push_back(id);
  ASSERT_FALSE(new_ids.empty()) << by_ids.out;
  const CliRun by_text = run_qkv_split("generate --checkpoint " + dir + "/ckpt --prompt '" + prompt +
                                       "' --max-new-tokens 8 --quiet");
  ASSERT_EQ(by_text.code, 0) << by_text.err;
  EXPECT_EQ(by_text.out, bpe.decode(new_ids) + "\n");
}

TEST(HfCli, UsageErrorsExitTwo) {
  const std::string dir = temp_dir("hf_usage");
  CliRun r = run_qkv("import --from onnx " + dir + " --output-dir " + dir + "/x");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--from"), std::string::npos) << r.out;
  r = run_qkv("import " + dir + " --output-dir " + dir + "/x");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--from"), std::string::npos) << r.out;
  r = run_qkv("export --to gguf " + dir + " --output-dir " + dir + "/x");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--to"), std::string::npos) << r.out;
  r = run_qkv("export --to hf " + dir);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--output-dir"), std::string::npos) << r.out;
}

TEST(HfCli, BadInputExitsOneNamingFileAndField) {
  const std::string hf = ref_path("hf_gpt2");
  if (hf.empty()) return;
  const std::string dir = temp_dir("hf_bad");
  expect_error(run_qkv("import --from hf " + dir + "/nothing --output-dir " + dir + "/x"), 1, {dir + "/nothing"});
  fs::create_directories(dir + "/pegasus");
  std::ofstream(dir + "/pegasus/config.json") << R"({"model_type": "pegasus", "d_model": 64})";
  std::ofstream(dir + "/pegasus/model.safetensors") << "";
  expect_error(run_qkv("import --from hf " + dir + "/pegasus --output-dir " + dir + "/x"), 1,
               {dir + "/pegasus/config.json", "\"model_type\"", "\"pegasus\"",
                "\"gpt2\", \"bert\", \"marian\", \"t5\", \"bart\", \"mbart\" and \"m2m_100\""});
  fs::create_directories(dir + "/scaled");
  fs::copy_file(hf + "/model.safetensors", dir + "/scaled/model.safetensors");
  std::string config = read_file(hf + "/config.json");
  const std::string off = "\"scale_attn_by_inverse_layer_idx\": false";
  ASSERT_NE(config.find(off), std::string::npos);
  config.replace(config.find(off), off.size(), "\"scale_attn_by_inverse_layer_idx\": true");
  std::ofstream(dir + "/scaled/config.json") << config;
  expect_error(run_qkv("import --from hf " + dir + "/scaled --output-dir " + dir + "/x"), 1,
               {dir + "/scaled/config.json", "\"scale_attn_by_inverse_layer_idx\"", "not supported"});
  EXPECT_FALSE(fs::exists(dir + "/x"));
  // The seed's encoder-decoder model exports as Marian only where Marian can express it: its
  // interleaved positional table is refused by name.
  const CliRun init = run_qkv("init --config " + ref_path("model_small/config.json") + " --output-dir " + dir + "/seq2seq");
  ASSERT_EQ(init.code, 0) << init.out;
  expect_error(run_qkv("export --to hf " + dir + "/seq2seq --output-dir " + dir + "/y"), 1,
               {"positions \"sinusoidal\"", "Marian cannot express it"});
  EXPECT_FALSE(fs::exists(dir + "/y"));
  expect_error(run_qkv("export --to hf " + dir + "/missing --output-dir " + dir + "/y"), 1, {dir + "/missing"});
}

// An imported Marian model translates text as transformers does (tests/python/make_marian_refs.py)
// and scores pairs of ids given with its own special ids (the decoder start is the pad id).
TEST(HfCli, ImportedMarianTranslatesTextAndScoresIds) {
  const std::string hf = ref_path("hf_marian");
  if (hf.empty()) return;
  std::ifstream refs_in(ref_path("hf_marian_refs.json"));
  const nlohmann::json refs = nlohmann::json::parse(refs_in);
  const std::string dir = temp_dir("hf_marian");
  CliRun r = run_qkv("import --from hf " + hf + " --output-dir " + dir + "/ckpt");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Marian from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("qkv: note: bad_words_ids"), std::string::npos) << r.out;
  for (const char* f : {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(dir + "/ckpt/" + f)) << f;
  const std::string pad = std::to_string(refs["pad_id"].get<int>());
  r = run_qkv("info " + dir + "/ckpt");
  EXPECT_NE(r.out.find("special ids   pad " + pad + ", decoder start (bos) " + pad + ", eos 0; the target mask hides "
                       "future keys only"),
            std::string::npos)
      << r.out;
  {
    std::ofstream src(dir + "/src.txt"), ids(dir + "/src.ids"), tgt(dir + "/tgt.ids");
    for (const auto& line : refs["sources"]) src << line.get<std::string>() << "\n";
    for (size_t i = 0; i < refs["source_ids"].size(); ++i) {
      for (const auto& id : refs["source_ids"][i]) ids << id.get<int>() << " ";
      ids << "\n";
      tgt << refs["pad_id"].get<int>();
      for (const auto& id : refs["target_ids"][i]) tgt << " " << id.get<int>();
      tgt << "\n";
    }
  }
  const std::string limit = " --beam-size 1 --max-length-ratio 0 --max-length-offset " +
                            std::to_string(refs["new_tokens"].get<int>() - 1);
  const CliRun text = run_qkv_split("translate --checkpoint " + dir + "/ckpt --input " + dir + "/src.txt" + limit);
  ASSERT_EQ(text.code, 0) << text.err;
  std::string want;
  for (const auto& line : refs["greedy_texts"]) want += line.get<std::string>() + "\n";
  EXPECT_EQ(text.out, want);
  const CliRun score = run_qkv_split("score --checkpoint " + dir + "/ckpt --src " + dir + "/src.ids --tgt " + dir +
                                     "/tgt.ids --per-line");
  ASSERT_EQ(score.code, 0) << score.err;
  std::istringstream lines(score.out);
  for (const auto& lp : refs["log_probs"]) {
    double got = 0;
    ASSERT_TRUE(lines >> got) << score.out;
    EXPECT_NEAR(got, lp.get<double>(), 1e-4 * std::max(1.0, std::fabs(lp.get<double>())));
  }
}

TEST(HfCli, ImportedBartTranslatesAndScoresIds) {
  // BART and mBART checkpoints take ids: qkv translate --ids gives
  // generate's greedy ids (mBART's forced language code first), qkv score --per-line its
  // teacher-forced log-probabilities.
  if (ref_path("hf_bart").empty()) return;
  std::ifstream refs_in(ref_path("hf_bart_refs.json"));
  const nlohmann::json refs = nlohmann::json::parse(refs_in);
  for (const std::string name : {"hf_bart", "hf_mbart"}) {
    const nlohmann::json& r = refs[name];
    const std::string dir = temp_dir(name);
    CliRun run = run_qkv("import --from hf " + ref_path(name) + " --output-dir " + dir + "/ckpt");
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_NE(run.out.find(name == "hf_bart" ? "BART from" : "mBART from"), std::string::npos) << run.out;
    // BART's tokenizer.json comes along; the mBART directory has no tokenizer (ids only, said in a note).
    EXPECT_NE(run.out.find(name == "hf_bart" ? ", tokenizer.json)" : "qkv: note: no sentencepiece.bpe.model"),
              std::string::npos)
        << run.out;
    run = run_qkv("info " + dir + "/ckpt");
    EXPECT_NE(run.out.find("special ids   pad 1, decoder start (bos) 2, eos 2"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("embedding norm"), std::string::npos) << run.out;
    std::string want;
    {
      std::ofstream ids(dir + "/src.ids"), tgt(dir + "/tgt.ids");
      for (size_t i = 0; i < r["source_ids"].size(); ++i) {
        for (const auto& id : r["source_ids"][i]) ids << id.get<int>() << " ";
        ids << "\n";
        tgt << 2;
        for (const auto& id : r["target_ids"][i]) tgt << " " << id.get<int>();
        tgt << "\n";
        std::vector<int> greedy = r["greedy_ids"][i].get<std::vector<int>>();
        greedy.pop_back();  // the EOS
        for (size_t k = 0; k < greedy.size(); ++k) {
          if (k) want += ' ';  // (not `(k ? " " : "") + ...`: GCC 12 warns -Wrestrict on that, wrongly)
          want += std::to_string(greedy[k]);
        }
        want += "\n";
      }
    }
    const CliRun out = run_qkv_split("translate --ids --checkpoint " + dir + "/ckpt --input " + dir +
                                     "/src.ids --beam-size 1 --max-length-ratio 0 --max-length-offset 40");
    ASSERT_EQ(out.code, 0) << out.err;
    EXPECT_EQ(out.out, want) << name;
    const CliRun score = run_qkv_split("score --checkpoint " + dir + "/ckpt --src " + dir + "/src.ids --tgt " + dir +
                                       "/tgt.ids --per-line");
    ASSERT_EQ(score.code, 0) << score.err;
    std::istringstream lines(score.out);
    for (const auto& lp : r["log_probs"]) {
      double got = 0;
      ASSERT_TRUE(lines >> got) << score.out;
      EXPECT_NEAR(got, lp.get<double>(), 1e-4 * std::max(1.0, std::fabs(lp.get<double>()))) << name;
    }
  }
}

// M2M100 and NLLB checkpoints translate text into the language --target-lang names (their configs
// force none, as the released ones): qkv translate gives what the tokenizer, generate with
// forced_bos_token_id and decode give, greedy and beam 4; qkv score --per-line the teacher-forced
// log-probabilities. Without --target-lang, or with a code the tokenizer lacks, it stops naming it.
TEST(HfCli, ImportedM2M100TranslatesTextIntoTheTargetLanguage) {
  if (ref_path("hf_m2m100").empty()) return;
  std::ifstream refs_in(ref_path("hf_m2m100_refs.json"));
  const nlohmann::json refs = nlohmann::json::parse(refs_in);
  for (const std::string name : {"hf_m2m100", "hf_nllb"}) {
    const nlohmann::json& r = refs[name];
    const std::string dir = temp_dir(name);
    CliRun run = run_qkv("import --from hf " + ref_path(name) + " --out " + dir + "/ckpt");
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_NE(run.out.find("M2M100 from"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find(", tokenizer sentencepiece.bpe.model)"), std::string::npos) << run.out;
    {
      std::ofstream src(dir + "/src.txt"), ids(dir + "/src.ids"), tgt(dir + "/tgt.ids");
      for (const auto& line : r["texts"]) src << line.get<std::string>() << "\n";
      for (size_t i = 0; i < r["source_ids"].size(); ++i) {
        for (const auto& id : r["source_ids"][i]) ids << id.get<int>() << " ";
        ids << "\n";
        tgt << 2;
        for (const auto& id : r["target_ids"][i]) tgt << " " << id.get<int>();
        tgt << "\n";
      }
    }
    const std::string translate = "translate --checkpoint " + dir + "/ckpt --input " + dir + "/src.txt --length-penalty 0 "
                                  "--max-length-ratio 0 --max-length-offset 40 --target-lang " + r["tgt_lang"].get<std::string>();
    for (const std::string beam : {"1", "4"}) {
      const CliRun text = run_qkv_split(translate + " --beam " + beam);
      ASSERT_EQ(text.code, 0) << text.err;
      std::string want;
      for (const auto& line : r[beam == "1" ? "greedy_text" : "beam_text"]) want += line.get<std::string>() + "\n";
      EXPECT_EQ(text.out, want) << name << " beam " << beam;
    }
    const CliRun score = run_qkv_split("score --checkpoint " + dir + "/ckpt --src " + dir + "/src.ids --tgt " + dir +
                                       "/tgt.ids --per-line");
    ASSERT_EQ(score.code, 0) << score.err;
    std::istringstream lines(score.out);
    for (const auto& lp : r["log_probs"]) {
      double got = 0;
      ASSERT_TRUE(lines >> got) << score.out;
      EXPECT_NEAR(got, lp.get<double>(), 1e-4 * std::max(1.0, std::fabs(lp.get<double>()))) << name;
    }
    expect_error(run_qkv("translate --checkpoint " + dir + "/ckpt --input " + dir + "/src.txt"), 2, {"--target-lang"});
    expect_error(run_qkv("translate --checkpoint " + dir + "/ckpt --input " + dir + "/src.txt --target-lang xx_Fake"), 1,
                 {"--target-lang \"xx_Fake\"", "not a language of the tokenizer"});
  }
}

}  // namespace
}  // namespace qkv::testing
