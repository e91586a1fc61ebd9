// Hugging Face BART and mBART -> qkv (interop/hf_bart.h), against BartForConditionalGeneration and
// MBartForConditionalGeneration models that `transformers` built and saved
// (tests/python/make_bart_refs.py): per-pair log-probabilities within 1e-4 relative of
// transformers', greedy output identical to model.generate (BART's decoder starting from its EOS,
// mBART's forced target-language code; from ids, and for BART from text through its tokenizer.json), beam search scoring as the teacher-forced forward, the
// options surviving config.json, and refusals naming their file and field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "model/hf_import_refs.h"
#include "model/ref_dir.h"
#include "qkv/api/translator.h"
#include "qkv/interop/hf_bart.h"
#include "qkv/interop/hf_import.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::test_support::error_message_of;
using testing::decoder_lines;
using testing::expect_log_probs_match;
using testing::id_lines;

json bart_refs() { return testing::read_ref_json("hf_bart_refs.json"); }

using testing::imported_checkpoint;

const char* const kBartModels[] = {"hf_bart", "hf_mbart"};
constexpr int32_t kBartEos = 2;

TEST(HfBart, ConfigTakesBartsChoices) {
  const models::TransformerConfig bart = interop::hf_bart_config(testing::ref_path("hf_bart"));
  EXPECT_EQ(bart.norm, models::NormPosition::Post);
  EXPECT_EQ(bart.positions, "learned");
  EXPECT_TRUE(bart.embedding_norm && bart.tie_output_embedding && bart.share_embeddings);
  EXPECT_FALSE(bart.scale_embeddings || bart.target_query_mask);
  EXPECT_EQ(bart.activation, "gelu");
  EXPECT_EQ(bart.max_seq_length, 64);
  EXPECT_EQ(bart.pad_id, 1);
  EXPECT_EQ(bart.eos_id, 2);
  EXPECT_EQ(bart.bos_id, 2) << "BART's decoder starts from its EOS";
  EXPECT_EQ(bart.forced_bos_id, -1);
  const models::TransformerConfig mbart = interop::hf_bart_config(testing::ref_path("hf_mbart"));
  EXPECT_EQ(mbart.norm, models::NormPosition::Pre);
  EXPECT_TRUE(mbart.scale_embeddings && mbart.embedding_norm);
  EXPECT_EQ(mbart.forced_bos_id, 199) << "from generation_config.json";
  // The choices survive config.json.
  const models::TransformerConfig back = models::config_from_json(models::config_to_json(mbart), "config.json");
  EXPECT_EQ(back.positions, "learned");
  EXPECT_TRUE(back.embedding_norm);
  EXPECT_EQ(back.forced_bos_id, 199);
  EXPECT_EQ(back.norm, models::NormPosition::Pre);
}

TEST(HfBart, NewOptionsAreWrittenOnlyWhenSetAndRefusedElsewhere) {
  const std::string seed = models::config_to_json(models::TransformerConfig{});
  EXPECT_EQ(seed.find("embedding_norm"), std::string::npos);
  EXPECT_EQ(seed.find("forced_bos_id"), std::string::npos);
  for (const std::string field : {"\"embedding_norm\": true", "\"forced_bos_id\": 3"}) {
    const std::string m = error_message_of([&] {
      models::config_from_json("{\"architecture\": \"decoder-only\", " + field + "}", "config.json");
    });
    EXPECT_NE(m.find("does not apply"), std::string::npos) << m;
  }
  const std::string m = error_message_of([&] {
    models::config_from_json(R"({"tgt_vocab_size": 100, "src_vocab_size": 100, "forced_bos_id": 100})", "config.json");
  });
  EXPECT_NE(m.find("forced_bos_id"), std::string::npos) << m;
}

TEST(HfBart, LogProbabilitiesEqualTransformers) {
  const json r = bart_refs();
  for (const char* name : kBartModels) {
    auto model = models::load_model(imported_checkpoint(name));
    model->eval();
    const std::vector<data::IdLine> tgt = decoder_lines(r[name]["target_ids"], model->config().bos_id);
    // Batched with padding (pad id 1): positions and masks must leave each row's numbers alone.
    const train::ScoreResult got = train::score(*model, id_lines(r[name]["source_ids"]), tgt, 4);
    expect_log_probs_match(got.line_log_prob, r[name]["log_probs"], name);
  }
}

TEST(HfBart, GreedyOutputEqualsGenerate) {
  const json r = bart_refs();
  for (const char* name : kBartModels) {
    ASSERT_GT(r[name]["min_top2_margin"].get<double>(), 1e-3);
    const api::Translator translator(imported_checkpoint(name));
    api::TranslationOptions o;
    o.search.beam_size = 1;
    o.search.max_length_ratio = 0;
    o.search.max_length_offset = r["new_tokens"].get<int64_t>();
    o.batch_size = 4;
    for (const bool cache : {true, false}) {
      o.search.use_cache = cache;
      const auto got = translator.translate_ids(id_lines(r[name]["source_ids"]), o);
      ASSERT_EQ(got.size(), r[name]["greedy_ids"].size());
      for (size_t i = 0; i < got.size(); ++i) {
        std::vector<int32_t> want = r[name]["greedy_ids"][i].get<std::vector<int32_t>>();
        ASSERT_EQ(want.back(), kBartEos);
        want.pop_back();  // qkv's output ends before EOS
        EXPECT_EQ(got[i][0].tokens, want) << name << " source " << i << (cache ? "" : " (no cache)");
      }
    }
  }
}

TEST(HfBart, TextTranslationEqualsTokenizerGenerateDecode) {
  // The imported checkpoint carries BART's tokenizer.json: qkv translate on text gives what
  // transformers' tokenizer, generate and decode(skip_special_tokens=True) give.
  const json r = bart_refs()["hf_bart"];
  ASSERT_TRUE(fs::exists(imported_checkpoint("hf_bart") + "/tokenizer.json"));
  const api::Translator translator(imported_checkpoint("hf_bart"));
  api::TranslationOptions o;
  o.search.beam_size = 1;
  o.search.max_length_ratio = 0;
  o.search.max_length_offset = bart_refs()["new_tokens"].get<int64_t>();
  o.batch_size = 3;
  const std::vector<std::string> texts = r["texts"].get<std::vector<std::string>>();
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(translator.encode_source(texts[i], o, "line"), r["text_ids"][i].get<std::vector<int32_t>>()) << texts[i];
  const auto got = translator.translate(texts, o);
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> want = r["text_greedy_ids"][i].get<std::vector<int32_t>>();
    want.pop_back();  // EOS
    EXPECT_EQ(got[i][0].tokens, want) << texts[i];
    EXPECT_EQ(got[i][0].text, r["text_greedy"][i].get<std::string>()) << texts[i];
  }
  EXPECT_FALSE(fs::exists(imported_checkpoint("hf_mbart") + "/tokenizer.json"));
}

// A BART directory as transformers before 4.34 (or save_pretrained(legacy_format=True)) left it:
// the slow tokenizer's vocab.json and merges.txt (written by the reference's save_pretrained), no
// tokenizer.json, and a tokenizer_config.json without added_tokens_decoder. The import makes the
// tokenizer.json BartTokenizerFast makes of them (the same vocabulary, merges, added tokens and
// components as the reference's own), and text in gives transformers' text out.
TEST(HfBart, SlowTokenizerFilesWithoutTokenizerJsonAreRead) {
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "legacy_tokenizer"), out = dir + "_ckpt";
  fs::copy(testing::ref_path("hf_bart"), dir, fs::copy_options::recursive);
  ASSERT_TRUE(fs::exists(dir + "/vocab.json") && fs::exists(dir + "/merges.txt"));
  fs::remove(dir + "/tokenizer.json");
  std::ifstream config_in(dir + "/tokenizer_config.json");
  json config = json::parse(config_in);
  config.erase("added_tokens_decoder");
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
  const interop::HfConversion info = interop::import_hf(dir, out);
  EXPECT_TRUE(info.tokenizer);
  EXPECT_TRUE(std::any_of(info.notes.begin(), info.notes.end(),
                          [](const std::string& n) { return n.find("tokenizer.json made of") == 0; }));
  std::ifstream made_in(out + "/tokenizer.json"), original_in(testing::ref_path("hf_bart") + "/tokenizer.json");
  const json made = json::parse(made_in), original = json::parse(original_in);
  for (const char* part : {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"})
    EXPECT_EQ(made[part], original[part]) << part << " is not what BartTokenizerFast made";
  const json r = bart_refs()["hf_bart"];
  const api::Translator translator(out);
  api::TranslationOptions o;
  o.search.beam_size = 1;
  o.search.max_length_ratio = 0;
  o.search.max_length_offset = bart_refs()["new_tokens"].get<int64_t>();
  const std::vector<std::string> texts = r["texts"].get<std::vector<std::string>>();
  const auto got = translator.translate(texts, o);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(translator.encode_source(texts[i], o, "line"), r["text_ids"][i].get<std::vector<int32_t>>()) << texts[i];
    EXPECT_EQ(got[i][0].text, r["text_greedy"][i].get<std::string>()) << texts[i];
  }
}

TEST(HfBart, SlowTokenizerFilesAreRefusedNamingTheFileAndLine) {
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "bad_merges");
  fs::copy(testing::ref_path("hf_bart"), dir, fs::copy_options::recursive);
  fs::remove(dir + "/tokenizer.json");
  std::ofstream(dir + "/merges.txt", std::ios::app) << "qq zz\n";
  const std::string m = error_message_of([&] { interop::import_hf(dir, dir + "_ckpt"); });
  EXPECT_NE(m.find(dir + "/merges.txt: line "), std::string::npos) << m;
  EXPECT_NE(m.find("\"qq\" is not in vocab.json"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir + "_ckpt"));
}

TEST(HfBart, CleanUpTokenizationSpacesIsFollowed) {
  // tokenizer_config.json's clean_up_tokenization_spaces true: the decoded text gets transformers'
  // clean_up_tokenization (" ," -> ","); false (the reference's) leaves it as decoded.
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "clean_up");
  fs::copy(imported_checkpoint("hf_bart"), dir, fs::copy_options::recursive);
  ASSERT_TRUE(fs::exists(dir + "/tokenizer_config.json"));
  std::ifstream in(dir + "/tokenizer_config.json");
  json config = json::parse(in);
  EXPECT_FALSE(config.value("clean_up_tokenization_spaces", false));
  config["clean_up_tokenization_spaces"] = true;
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
  fs::remove(dir + "/manifest.json");  // it records the file's old size (a checkpoint without one loads)
  const api::Translator plain(imported_checkpoint("hf_bart")), cleaned(dir);
  const std::vector<int32_t> ids = plain.encode_source("a , b . c ?", {}, "text");
  const std::vector<int32_t> inner(ids.begin() + 1, ids.end() - 1);  // without <s> and </s>
  EXPECT_EQ(plain.decode_target(inner), "a , b . c ?");
  EXPECT_EQ(cleaned.decode_target(inner), "a, b. c?");
}

TEST(HfBart, BeamSearchScoresAsTheTeacherForcedForward) {
  // BART's decoder start is its EOS: search must not ban it as it bans a distinct start id.
  const json r = bart_refs();
  const api::Translator translator(imported_checkpoint("hf_bart"));
  api::TranslationOptions o;
  o.search.beam_size = 4;
  o.search.length_penalty = 0;
  o.batch_size = 3;
  const std::vector<data::IdLine> src = id_lines(r["hf_bart"]["source_ids"]);
  const auto got = translator.translate_ids(src, o);
  auto model = models::load_model(imported_checkpoint("hf_bart"));
  model->eval();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(got[i].empty());
    data::IdLine tgt{kBartEos};
    tgt.insert(tgt.end(), got[i][0].tokens.begin(), got[i][0].tokens.end());
    tgt.push_back(kBartEos);
    const train::ScoreResult forced = train::score(*model, {src[i]}, {tgt}, 1);
    EXPECT_NEAR(got[i][0].log_prob, forced.line_log_prob[0], 1e-4 * std::max(1.0, std::fabs(forced.line_log_prob[0])))
        << "source " << i;
  }
}

TEST(HfBart, BeamSearchStartsWithTheForcedLanguageCode) {
  const json r = bart_refs();
  const api::Translator translator(imported_checkpoint("hf_mbart"));
  api::TranslationOptions o;
  o.search.beam_size = 4;
  o.search.n_best = 2;
  const auto got = translator.translate_ids(id_lines(r["hf_mbart"]["source_ids"]), o);
  for (size_t i = 0; i < got.size(); ++i)
    for (const api::Translation& t : got[i]) {
      ASSERT_FALSE(t.tokens.empty()) << "source " << i;
      EXPECT_EQ(t.tokens[0], 199) << "source " << i;
    }
}

TEST(HfBart, SpecialIdsAreWhatGenerateUses) {
  // generation_config.json wins over config.json; without a decoder start, generate starts from
  // bos_token_id (mBART's configs have none).
  const std::string hf = testing::ref_path("hf_mbart");
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "ids");
  fs::create_directories(dir);
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
  };
  json config = read(hf + "/config.json"), generation = read(hf + "/generation_config.json");
  generation["decoder_start_token_id"] = 5;
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::ofstream(dir + "/generation_config.json") << generation.dump(2);
  std::vector<std::string> notes;
  EXPECT_EQ(interop::hf_bart_config(dir, &notes).bos_id, 5);
  EXPECT_EQ(interop::hf_bart_config(dir).forced_bos_id, 199);
  bool forced_eos_noted = false;
  for (const std::string& n : notes) forced_eos_noted = forced_eos_noted || n.find("forced_eos_token_id 2") == 0;
  EXPECT_TRUE(forced_eos_noted);
  config.erase("decoder_start_token_id");
  generation.erase("decoder_start_token_id");
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::ofstream(dir + "/generation_config.json") << generation.dump(2);
  EXPECT_EQ(interop::hf_bart_config(dir).bos_id, 0) << "bos_token_id";
}

// A copy of reference model `model` whose config.json has `from` replaced by `to`.
std::string bart_with_config(const std::string& model, const std::string& dir, const std::string& name,
                        const std::string& from, const std::string& to) {
  const std::string hf = testing::ref_path(model), out = dir + "/" + name;
  fs::create_directories(out);
  fs::copy_file(hf + "/model.safetensors", out + "/model.safetensors");
  std::ifstream in(hf + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(config.find(from), std::string::npos) << from;
  config.replace(config.find(from), from.size(), to);
  std::ofstream(out + "/config.json") << config;
  return out;
}

TEST(HfBart, RefusesWhatQkvCannotExpress) {
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "bad");
  const auto expect_refused = [&](const std::string& d, const std::vector<std::string>& parts) {
    const std::string m = error_message_of([&] { interop::import_hf(d, dir + "/out"); });
    EXPECT_FALSE(m.empty());
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    EXPECT_FALSE(fs::exists(dir + "/out"));
  };
  const std::string bart = "\"model_type\": \"bart\"", mbart = "\"model_type\": \"mbart\"";
  expect_refused(bart_with_config("hf_bart", dir, "depth", "\"decoder_layers\": 2", "\"decoder_layers\": 3"),
                 {"config.json", "\"decoder_layers\"", "not supported"});
  expect_refused(bart_with_config("hf_bart", dir, "act", "\"activation_function\": \"gelu\"", "\"activation_function\": \"tanh\""),
                 {"config.json", "\"activation_function\"", "tanh"});
  expect_refused(bart_with_config("hf_bart", dir, "prenorm", bart, "\"normalize_before\": true, " + bart),
                 {"config.json", "\"normalize_before\"", "post-LN"});
  expect_refused(bart_with_config("hf_mbart", dir, "postnorm", mbart, "\"normalize_before\": false, " + mbart),
                 {"config.json", "\"normalize_before\"", "pre-LN"});
  expect_refused(bart_with_config("hf_bart", dir, "bias_logits", bart, "\"add_bias_logits\": true, " + bart),
                 {"config.json", "\"add_bias_logits\""});
  expect_refused(bart_with_config("hf_bart", dir, "static", bart, "\"static_position_embeddings\": true, " + bart),
                 {"config.json", "\"static_position_embeddings\""});
  expect_refused(bart_with_config("hf_bart", dir, "no_embedding_norm", bart, "\"normalize_embedding\": false, " + bart),
                 {"config.json", "\"normalize_embedding\""});
  // Weights that do not match the config: the tensor is named.
  expect_refused(bart_with_config("hf_bart", dir, "positions", "\"max_position_embeddings\": 64",
                             "\"max_position_embeddings\": 80"),
                 {"model.safetensors", "embed_positions.weight"});
  // An mBART directory that claims to be BART: its final norms are left over, and named.
  expect_refused(bart_with_config("hf_mbart", dir, "claims_bart", mbart, bart), {"model.safetensors", ".layer_norm.", "BART's model"});
}

TEST(HfBart, RefusesAForcedEosOtherThanTheEos) {
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "eos");
  const std::string d = bart_with_config("hf_bart", dir, "forced_eos", "\"forced_eos_token_id\": 2", "\"forced_eos_token_id\": 5");
  fs::remove(d + "/generation_config.json");  // none was copied; config.json's value is the one read
  const std::string m = error_message_of([&] { interop::import_hf(d, dir + "/out"); });
  EXPECT_NE(m.find("\"forced_eos_token_id\""), std::string::npos) << m;
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
}

TEST(HfBart, ExportGivesBackTransformersTensors) {
  for (const char* name : kBartModels) {
    const std::string out = testing::expect_export_gives_back_tensors(name);
    std::ifstream in(out + "/config.json");
    const json config = json::parse(in);
    EXPECT_EQ(config["model_type"], std::string(name) == "hf_bart" ? "bart" : "mbart") << name;
    EXPECT_EQ(config["decoder_start_token_id"], 2) << name;
    std::ifstream gin(out + "/generation_config.json");
    const json generation = json::parse(gin);
    if (std::string(name) == "hf_mbart") {
      EXPECT_EQ(generation["forced_bos_token_id"], 199);
    } else {
      EXPECT_FALSE(generation.contains("forced_bos_token_id"));
    }
  }
  // BART's tokenizer comes along; the mBART model came without one.
  const interop::HfConversion bart = interop::export_hf(imported_checkpoint("hf_bart"), testing::fresh_temp_dir("qkv_export", "tok"));
  EXPECT_EQ(bart.hf_class, "BartForConditionalGeneration");
  EXPECT_EQ(bart.tokenizer_files, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  const interop::HfConversion mbart = interop::export_hf(imported_checkpoint("hf_mbart"), testing::fresh_temp_dir("qkv_export", "mb"));
  EXPECT_EQ(mbart.model_type, "mbart");
  EXPECT_TRUE(mbart.tokenizer_files.empty());
}

TEST(HfBart, ExportRefusesWhatBartCannotExpress) {
  models::TransformerConfig c = models::load_config(imported_checkpoint("hf_bart") + "/config.json");
  EXPECT_NO_THROW((void)interop::hf_bart_config_json(c));
  const auto expect_refused = [&](models::TransformerConfig bad, const std::vector<std::string>& parts) {
    const std::string m = error_message_of([&] { (void)interop::hf_bart_config_json(bad); });
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  };
  models::TransformerConfig bad = c;
  bad.embedding_norm = false;
  expect_refused(bad, {"embedding_norm false", "BART cannot express"});
  bad = c;
  bad.norm = models::NormPosition::Pre;
  bad.embedding_norm = false;
  expect_refused(bad, {"embedding_norm false", "mBART cannot express"});
  bad = c;
  bad.share_embeddings = false;
  expect_refused(bad, {"share_embeddings false"});
  bad = c;
  bad.target_query_mask = true;
  expect_refused(bad, {"target_query_mask"});
  bad = c;
  bad.linear_bias = false;
  expect_refused(bad, {"linear_bias false"});
  bad = c;
  bad.positions = "sinusoidal";
  expect_refused(bad, {"positions \"learned\""});
  // A qkv model with BART's positions but not its embedding norm is refused through export_hf too.
  models::TransformerConfig trained = c;
  trained.embedding_norm = false;
  const std::string dir = testing::fresh_temp_dir("qkv_bart", "trained");
  models::save_model(dir, *models::make_model(trained, 1));
  const std::string m = error_message_of([&] { interop::export_hf(dir, dir + "_hf"); });
  EXPECT_NE(m.find("layernorm_embedding"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir + "_hf"));
}

}  // namespace
}  // namespace qkv
