// Hugging Face M2M100 / NLLB-200 -> qkv (interop/hf_m2m100.h) and mBART-50 with its text tokenizer
// (interop/hf_bart.h), against models and tokenizers that `transformers` built and saved
// (tests/python/make_m2m100_refs.py): per-pair log-probabilities within 1e-4 relative of
// transformers', text in and text out equal to tokenizer + generate + decode for greedy search and
// for beam search (4 beams, early_stopping=True, length_penalty 0: qkv's stopping rule and a
// ranking by log-probability), the target language chosen per call, and refusals naming their
// file and field.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "model/hf_import_refs.h"
#include "model/ref_dir.h"
#include "qkv/api/translator.h"
#include "qkv/interop/hf_import.h"
#include "qkv/interop/hf_m2m100.h"
#include "qkv/models/checkpoint.h"
#include "qkv/ops/ops.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::test_support::error_message_of;
using testing::decoder_lines;
using testing::expect_log_probs_match;
using testing::id_lines;

json m2m100_refs() { return testing::read_ref_json("hf_m2m100_refs.json"); }

using testing::imported_checkpoint;

const char* const kM2m100Models[] = {"hf_m2m100", "hf_nllb", "hf_mbart50"};
constexpr int32_t kM2m100Eos = 2;

std::vector<int32_t> without_eos(const json& ids) {
  std::vector<int32_t> v = ids.get<std::vector<int32_t>>();
  EXPECT_EQ(v.back(), kM2m100Eos);
  v.pop_back();  // qkv's output ends before EOS
  return v;
}

TEST(HfM2M100, ConfigTakesM2M100sChoices) {
  const models::TransformerConfig c = interop::hf_m2m100_config(testing::ref_path("hf_m2m100"));
  EXPECT_EQ(c.norm, models::NormPosition::Pre);
  EXPECT_EQ(c.positions, "sinusoidal_fairseq");
  EXPECT_TRUE(c.scale_embeddings && c.tie_output_embedding && c.share_embeddings);
  EXPECT_FALSE(c.embedding_norm || c.target_query_mask);
  EXPECT_EQ(c.activation, "relu");
  EXPECT_EQ(c.pad_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(c.bos_id, 2) << "the decoder starts from its EOS";
  EXPECT_EQ(c.forced_bos_id, -1) << "the target language is chosen per call";
  const models::TransformerConfig back = models::config_from_json(models::config_to_json(c), "config.json");
  EXPECT_EQ(back.positions, "sinusoidal_fairseq");
  // The option is the encoder-decoder's, and its frequencies need d_model / 2 - 1 > 0.
  std::string m = error_message_of([&] {
    models::config_from_json(R"({"architecture": "decoder-only", "positions": "sinusoidal_fairseq"})", "config.json");
  });
  EXPECT_NE(m.find("positions"), std::string::npos) << m;
  m = error_message_of([&] {
    models::config_from_json(R"({"d_model": 2, "num_heads": 1, "positions": "sinusoidal_fairseq"})", "config.json");
  });
  EXPECT_NE(m.find("d_model >= 4"), std::string::npos) << m;
}

TEST(HfM2M100, SinusoidalTableIsM2M100s) {
  // M2M100SinusoidalPositionalEmbedding.get_embedding(66, 6, padding_idx=1)[2:], by hand: half 3,
  // freq[i] = exp(-i ln(10000) / 2) = 1, 0.01, 0.0001; row p is position p + 2.
  const Tensor t = ops::sinusoidal_table_fairseq(4, 7, 2);
  for (int64_t p = 0; p < 4; ++p) {
    const double pos = static_cast<double>(p + 2);
    const double freq[] = {1.0, 0.01, 0.0001};
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(t.f32()[p * 7 + i], std::sin(pos * freq[i]), 1e-6) << p << " " << i;
      EXPECT_NEAR(t.f32()[p * 7 + 3 + i], std::cos(pos * freq[i]), 1e-6) << p << " " << i;
    }
    EXPECT_EQ(t.f32()[p * 7 + 6], 0.f) << "an odd width's last column";
  }
}

TEST(HfM2M100, LogProbabilitiesEqualTransformers) {
  const json r = m2m100_refs();
  for (const char* name : kM2m100Models) {
    auto model = models::load_model(imported_checkpoint(name));
    model->eval();
    const std::vector<data::IdLine> tgt = decoder_lines(r[name]["target_ids"], model->config().bos_id);
    // Batched with padding (pad id 1): positions and masks must leave each row's numbers alone.
    const train::ScoreResult got = train::score(*model, id_lines(r[name]["source_ids"]), tgt, 4);
    expect_log_probs_match(got.line_log_prob, r[name]["log_probs"], name);
  }
}

api::TranslationOptions options(const json& r, int beam) {
  api::TranslationOptions o;
  o.search.beam_size = beam;
  o.search.length_penalty = 0;
  o.search.max_length_ratio = 0;
  o.search.max_length_offset = r["new_tokens"].get<int64_t>();
  o.batch_size = 5;
  return o;
}

TEST(HfM2M100, TextTranslationEqualsTokenizerGenerateDecode) {
  // Text in, text out: the tokenizer's ids (source language code, text, </s>), generate's ids with
  // the target language forced, and decode(skip_special_tokens=True), greedy and beam 4.
  const json all = m2m100_refs();
  for (const char* name : kM2m100Models) {
    const json& r = all[name];
    const api::Translator translator(imported_checkpoint(name));
    ASSERT_TRUE(translator.multilingual()) << name;
    const std::vector<std::string> texts = r["texts"].get<std::vector<std::string>>();
    for (const int beam : {1, 4}) {
      api::TranslationOptions o = options(all, beam);
      o.target_lang = r["tgt_lang"].get<std::string>();
      for (size_t i = 0; i < texts.size(); ++i)
        EXPECT_EQ(translator.encode_source(texts[i], o, "line"), r["text_ids"][i].get<std::vector<int32_t>>()) << texts[i];
      const auto got = translator.translate(texts, o);
      const json& want_ids = r[beam == 1 ? "greedy_ids" : "beam_ids"];
      const json& want_text = r[beam == 1 ? "greedy_text" : "beam_text"];
      for (size_t i = 0; i < texts.size(); ++i) {
        ASSERT_FALSE(got[i].empty()) << name;
        EXPECT_EQ(got[i][0].tokens, without_eos(want_ids[i])) << name << " beam " << beam << ": " << texts[i];
        EXPECT_EQ(got[i][0].text, want_text[i].get<std::string>()) << name << " beam " << beam << ": " << texts[i];
      }
    }
  }
}

TEST(HfM2M100, TargetLanguageComesFromTheOptionsOrTheConfig) {
  // mBART-50's config forces its target language; M2M100's and NLLB's do not (generate is told).
  const json r = m2m100_refs();
  const api::Translator mbart(imported_checkpoint("hf_mbart50"));
  EXPECT_EQ(mbart.config().forced_bos_id, r["hf_mbart50"]["tgt_lang_id"].get<int32_t>());
  api::TranslationOptions o = options(r, 1);
  const auto by_config = mbart.translate({r["hf_mbart50"]["texts"][0].get<std::string>()}, o);
  EXPECT_EQ(by_config[0][0].tokens, without_eos(r["hf_mbart50"]["greedy_ids"][0]));
  o.target_lang = "fr_XX";
  const auto french = mbart.translate({r["hf_mbart50"]["texts"][0].get<std::string>()}, o);
  EXPECT_EQ(french[0][0].tokens[0], r["hf_mbart50"]["lang_ids"]["fr_XX"].get<int32_t>());
  // The M2M100 tokenizer takes "fr" and "__fr__"; an unknown code is named with some known ones.
  const api::Translator m2m(imported_checkpoint("hf_m2m100"));
  EXPECT_EQ(m2m.language_id("fr", "--target-lang"), r["hf_m2m100"]["lang_ids"]["fr"].get<int32_t>());
  EXPECT_EQ(m2m.language_id("__fr__", "--target-lang"), r["hf_m2m100"]["lang_ids"]["fr"].get<int32_t>());
  const std::string m = error_message_of([&] { m2m.language_id("xx_Fake", "--target-lang"); });
  EXPECT_NE(m.find("--target-lang \"xx_Fake\""), std::string::npos) << m;
  EXPECT_NE(m.find("__af__"), std::string::npos) << m;
}

TEST(HfM2M100, AnMBartTokenizerModelTranslatesIntoItsDecoderStartLanguageOnly) {
  // mbart-large-cc25's layout (MBartTokenizer): sources X </s> en_XX, and the decoder starts from
  // the target language's code (decoder_start_token_id), so no other target language can be forced.
  const json r = m2m100_refs();
  const std::string dir = testing::fresh_temp_dir("qkv_m2m100", "cc25");
  fs::copy(imported_checkpoint("hf_mbart50"), dir, fs::copy_options::recursive);
  fs::remove(dir + "/manifest.json");  // it records the files' old sizes (a checkpoint without one loads)
  fs::copy_file(testing::ref_path("tok_mbart") + "/tokenizer_config.json", dir + "/tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  const api::Translator translator(dir);
  api::TranslationOptions o = options(r, 1);
  const std::vector<int32_t> ids = translator.encode_source("Hello", o, "line");
  EXPECT_EQ(ids.back(), r["tok_mbart"]["lang_ids"]["en_XX"].get<int32_t>()) << "X </s> en_XX";
  o.target_lang = "fr_XX";
  const std::string m = error_message_of([&] { translator.translate({"Hello"}, o); });
  EXPECT_NE(m.find("MBartTokenizer"), std::string::npos) << m;
  EXPECT_NE(m.find("decoder_start_token_id"), std::string::npos) << m;
}

TEST(HfM2M100, ScoringATargetTextStartsWithItsLanguage) {
  // encode_target lays a target out as transformers' labels after the decoder start.
  const json r = m2m100_refs()["hf_nllb"];
  const api::Translator translator(imported_checkpoint("hf_nllb"));
  const std::string german = "Das Haus ist wunderbar.";
  const data::IdLine got = translator.encode_target(german, "deu_Latn");
  data::IdLine want{kM2m100Eos};
  for (const auto& id : r["target_ids"][0]) want.push_back(id.get<int32_t>());
  EXPECT_EQ(got, want);
}

// A copy of reference model `model` whose config.json has `from` replaced by `to` (`from` empty:
// the config unchanged), with the tokenizer files unless `tokenizer` is false.
std::string m2m100_with_config(const std::string& model, const std::string& dir, const std::string& name,
                        const std::string& from, const std::string& to, bool tokenizer = true) {
  const std::string hf = testing::ref_path(model), out = dir + "/" + name;
  fs::create_directories(out);
  for (const auto& entry : fs::directory_iterator(hf))
    if (tokenizer || entry.path().filename() == "model.safetensors")
      fs::copy_file(entry.path(), out + "/" + entry.path().filename().string());
  std::ifstream in(hf + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!from.empty()) {
    EXPECT_NE(config.find(from), std::string::npos) << from;
    config.replace(config.find(from), from.size(), to);
  }
  std::ofstream(out + "/config.json") << config;
  return out;
}

void expect_refused(const std::string& hf_dir, const std::string& out, const std::vector<std::string>& parts) {
  const std::string m = error_message_of([&] { interop::import_hf(hf_dir, out); });
  EXPECT_FALSE(m.empty());
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  EXPECT_FALSE(fs::exists(out));
}

TEST(HfM2M100, RefusesWhatQkvCannotExpress) {
  const std::string dir = testing::fresh_temp_dir("qkv_m2m100", "bad"), out = dir + "/out";
  const std::string type = "\"model_type\": \"m2m_100\"";
  expect_refused(m2m100_with_config("hf_m2m100", dir, "depth", "\"decoder_layers\": 2", "\"decoder_layers\": 3"), out,
                 {"config.json", "\"decoder_layers\"", "not supported"});
  expect_refused(m2m100_with_config("hf_m2m100", dir, "act", "\"activation_function\": \"relu\"",
                             "\"activation_function\": \"tanh\""),
                 out, {"config.json", "\"activation_function\"", "tanh"});
  expect_refused(m2m100_with_config("hf_m2m100", dir, "postnorm", type, "\"normalize_before\": false, " + type), out,
                 {"config.json", "\"normalize_before\"", "pre-LN"});
  expect_refused(m2m100_with_config("hf_m2m100", dir, "moe", type, "\"num_experts\": 4, " + type), out,
                 {"config.json", "\"num_experts\"", "NLLB-MoE"});
  expect_refused(m2m100_with_config("hf_m2m100", dir, "emb_norm", type, "\"layernorm_embedding\": true, " + type), out,
                 {"config.json", "\"layernorm_embedding\""});
  expect_refused(m2m100_with_config("hf_m2m100", dir, "width", "\"d_model\": 64", "\"d_model\": 32"), out,
                 {"model.safetensors", "shared.weight"});
}

TEST(HfM2M100, RefusesABrokenOrMissingTokenizerFileNamingIt) {
  const std::string dir = testing::fresh_temp_dir("qkv_m2m100", "tok"), out = dir + "/out";
  // M2M100's vocab.json missing beside its sentencepiece.bpe.model.
  const std::string no_vocab = m2m100_with_config("hf_m2m100", dir, "no_vocab", "", "");
  fs::remove(no_vocab + "/vocab.json");
  expect_refused(no_vocab, out, {no_vocab + "/vocab.json", "missing"});
  // tokenizer_config.json missing: its tokenizer_class and added_tokens_decoder are needed.
  const std::string no_config = m2m100_with_config("hf_nllb", dir, "no_config", "", "");
  fs::remove(no_config + "/tokenizer_config.json");
  expect_refused(no_config, out, {no_config + "/tokenizer_config.json", "missing"});
  // A tokenizer class qkv does not read.
  const std::string other = m2m100_with_config("hf_nllb", dir, "other_class", "", "");
  {
    std::ifstream in(other + "/tokenizer_config.json");
    json config = json::parse(in);
    config["tokenizer_class"] = "XLMRobertaTokenizer";
    std::ofstream(other + "/tokenizer_config.json") << config.dump(2);
  }
  expect_refused(other, out, {other + "/tokenizer_config.json", "\"tokenizer_class\"", "XLMRobertaTokenizer"});
  // No tokenizer at all: the import goes on, ids only, with a note.
  const std::string bare = m2m100_with_config("hf_m2m100", dir, "bare", "", "", false);
  const interop::HfConversion info = interop::import_hf(bare, out);
  EXPECT_FALSE(info.tokenizer);
  ASSERT_FALSE(info.notes.empty());
  bool noted = false;
  for (const std::string& n : info.notes) noted = noted || n.find("no sentencepiece.bpe.model") == 0;
  EXPECT_TRUE(noted);
}

TEST(HfM2M100, ExportGivesBackTransformersTensorsAndTokenizer) {
  const std::vector<std::string> multilingual{"sentencepiece.bpe.model", "tokenizer_config.json"};
  for (const char* name : kM2m100Models) {
    const std::string out = testing::expect_export_gives_back_tensors(name);
    std::ifstream in(out + "/config.json");
    const json config = json::parse(in);
    EXPECT_EQ(config["model_type"], std::string(name) == "hf_mbart50" ? "mbart" : "m2m_100") << name;
    std::vector<std::string> files = multilingual;
    if (std::string(name) == "hf_m2m100") files.insert(files.begin() + 1, "vocab.json");
    for (const std::string& f : files) {
      std::ifstream a(testing::ref_path(name) + "/" + f, std::ios::binary), b(out + "/" + f, std::ios::binary);
      EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}))
          << name << ": " << f << " is not the original's";
    }
  }
  const interop::HfConversion info = interop::export_hf(imported_checkpoint("hf_m2m100"), testing::fresh_temp_dir("qkv_export", "m"));
  EXPECT_EQ(info.hf_class, "M2M100ForConditionalGeneration");
  EXPECT_EQ(info.tokenizer_files, (std::vector<std::string>{"sentencepiece.bpe.model", "vocab.json", "tokenizer_config.json"}));
}

TEST(HfM2M100, ExportRefusesWhatM2M100CannotExpress) {
  const models::TransformerConfig c = models::load_config(imported_checkpoint("hf_m2m100") + "/config.json");
  EXPECT_NO_THROW((void)interop::hf_m2m100_config_json(c));
  const auto expect_refused = [&](const std::function<void(models::TransformerConfig&)>& change,
                                  const std::vector<std::string>& parts) {
    models::TransformerConfig bad = c;
    change(bad);
    const std::string m = error_message_of([&] { (void)interop::hf_m2m100_config_json(bad); });
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  };
  expect_refused([](auto& b) { b.norm = models::NormPosition::Post; }, {"post-LN", "M2M100 cannot express"});
  expect_refused([](auto& b) { b.embedding_norm = true; }, {"embedding_norm true"});
  expect_refused([](auto& b) { b.layer_norm = "rms"; }, {"layer_norm \"rms\""});
  expect_refused([](auto& b) { b.gated_feed_forward = true; }, {"gated_feed_forward"});
  // A model qkv trained with M2M100's layout but an output bias M2M100 does not have.
  const std::string dir = testing::fresh_temp_dir("qkv_m2m100", "bias");
  {
    auto model = models::make_model(c, 1);
    auto& seq2seq = dynamic_cast<models::Transformer&>(*model);
    seq2seq.fc.bias.value().zero();  // then one element as training would leave it
    seq2seq.fc.bias.value().f32()[3] = 0.5f;
    models::save_model(dir, *model);
  }
  const std::string m = error_message_of([&] { interop::export_hf(dir, dir + "_hf"); });
  EXPECT_NE(m.find("fc.bias[3]"), std::string::npos) << m;
  EXPECT_NE(m.find("no bias in its output layer"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir + "_hf"));
}

}  // namespace
}  // namespace qkv
