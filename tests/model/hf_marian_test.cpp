// Hugging Face Marian (OPUS-MT) -> qkv (interop/hf_marian.h, text/marian_tokenizer.h), against a
// MarianMTModel and MarianTokenizer that `transformers` built and saved (tests/python/
// make_marian_refs.py): per-pair log-probabilities within 1e-4 relative of transformers' (tied and
// untied output layers), greedy output identical to model.generate (ids and decoded text, the
// forced EOS at the length limit included), tokenizer ids and decoded text identical to
// MarianTokenizer's on varied lines, and every refusal naming its file and field or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "model/hf_import_refs.h"
#include "model/ref_dir.h"
#include "qkv/api/translator.h"
#include "qkv/interop/hf_import.h"
#include "qkv/interop/hf_marian.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/marian_tokenizer.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::test_support::error_message_of;

json marian_refs() { return testing::read_ref_json("hf_marian_refs.json"); }

std::string fresh_marian_dir(const std::string& name) { return testing::fresh_temp_dir("qkv_marian", name); }

using testing::decoder_lines;
using testing::expect_log_probs_match;
using testing::id_lines;

using testing::imported_checkpoint;

using test_support::expect_contains;

TEST(HfMarian, ConfigTakesMariansChoicesAndSpecialIds) {
  const json r = marian_refs();
  std::vector<std::string> notes;
  const models::TransformerConfig c = interop::hf_marian_config(testing::ref_path("hf_marian"), &notes);
  const int32_t pad = r["pad_id"].get<int32_t>();
  EXPECT_TRUE(c.encoder_decoder());
  EXPECT_EQ(c.src_vocab_size, r["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_EQ(c.activation, "silu");
  EXPECT_EQ(c.positions, "sinusoidal_halves");
  EXPECT_FALSE(c.target_query_mask);
  EXPECT_TRUE(c.scale_embeddings && c.share_embeddings && c.tie_output_embedding);
  EXPECT_EQ(c.pad_id, pad);
  EXPECT_EQ(c.bos_id, pad) << "the decoder starts from decoder_start_token_id";
  EXPECT_EQ(c.eos_id, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("bad_words_ids"), std::string::npos);
  // The choices survive config.json.
  const models::TransformerConfig back = models::config_from_json(models::config_to_json(c), "config.json");
  EXPECT_EQ(back.positions, "sinusoidal_halves");
  EXPECT_FALSE(back.target_query_mask);
  EXPECT_EQ(back.activation, "silu");
}

TEST(HfMarian, LogProbabilitiesEqualTransformers) {
  const json r = marian_refs();
  const std::vector<data::IdLine> src = id_lines(r["source_ids"]);
  for (const auto& [dir, key] : {std::pair<std::string, std::string>{"hf_marian", "log_probs"},
                                 {"hf_marian_untied", "untied_log_probs"}}) {
    auto model = models::load_model(imported_checkpoint(dir));
    model->eval();
    const std::vector<data::IdLine> tgt = decoder_lines(r["target_ids"], model->config().bos_id);
    // Batched with padding (pad = the last id, not 0): what the seed's masks would get wrong.
    const train::ScoreResult got = train::score(*model, src, tgt, 4);
    expect_log_probs_match(got.line_log_prob, r[key], dir);
  }
}

TEST(HfMarian, GreedyOutputEqualsGenerate) {
  const json r = marian_refs();
  ASSERT_GT(r["min_top2_margin"].get<double>(), 1e-3);
  const api::Translator translator(imported_checkpoint("hf_marian"));
  api::TranslationOptions o;
  o.search.beam_size = 1;
  // generate(max_new_tokens=N) with forced_eos_token_id: at most N - 1 tokens, then EOS (forced at
  // the limit); qkv's limit of N - 1 tokens ends the same way.
  o.search.max_length_ratio = 0;
  o.search.max_length_offset = r["new_tokens"].get<int64_t>() - 1;
  o.batch_size = 4;
  const auto by_ids = translator.translate_ids(id_lines(r["source_ids"]), o);
  const auto by_text = translator.translate(r["sources"].get<std::vector<std::string>>(), o);
  ASSERT_EQ(by_ids.size(), r["greedy_ids"].size());
  bool some_cut = false, some_finished = false;
  for (size_t i = 0; i < by_ids.size(); ++i) {
    std::vector<int32_t> want = r["greedy_ids"][i].get<std::vector<int32_t>>();
    ASSERT_EQ(want.back(), 0) << "transformers' output ends with EOS";
    want.pop_back();
    EXPECT_EQ(by_ids[i][0].tokens, want) << "source " << i;
    EXPECT_EQ(by_text[i][0].tokens, want) << "source " << i << ": the text encodes to the reference ids";
    EXPECT_EQ(by_text[i][0].text, r["greedy_texts"][i].get<std::string>()) << "source " << i;
    (static_cast<int64_t>(want.size()) == o.search.max_length_offset ? some_cut : some_finished) = true;
  }
  EXPECT_TRUE(some_cut && some_finished) << "the references cover both endings";
}

TEST(HfMarian, TokenizerEqualsMarianTokenizer) {
  const json r = marian_refs();
  const std::string dir = testing::ref_path("hf_marian");
  const auto source = text::MarianTokenizer::load(dir, false), target = text::MarianTokenizer::load(dir, true);
  const auto lines = r["roundtrip_lines"].get<std::vector<std::string>>();
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int32_t> ids = source->with_special_tokens(source->encode(lines[i]));
    EXPECT_EQ(ids, r["roundtrip_ids"][i].get<std::vector<int32_t>>()) << "\"" << lines[i] << "\"";
    // transformers' decode reads ids with the target model (both were trained on the same text
    // here only in part: pieces the target model lacks come back as themselves).
    EXPECT_EQ(target->decode(ids), r["roundtrip_decoded"][i].get<std::string>()) << "\"" << lines[i] << "\"";
  }
  const auto targets = r["targets"].get<std::vector<std::string>>();
  for (size_t i = 0; i < targets.size(); ++i)
    EXPECT_EQ(target->with_special_tokens(target->encode(targets[i])), r["target_ids"][i].get<std::vector<int32_t>>())
        << "text_target \"" << targets[i] << "\"";
  EXPECT_EQ(source->special_token_id("<pad>"), r["pad_id"].get<int32_t>());
  EXPECT_EQ(source->special_token_id("</s>"), 0);
  expect_contains(error_message_of([&] { (void)target->decode({static_cast<int32_t>(target->vocab_size())}); }),
                  {"vocab.json", "out of range"});
}

// A copy of the reference directory that a test then damages.
std::string copy_of(const std::string& name) {
  const std::string dst = fresh_marian_dir(name);
  fs::copy(testing::ref_path("hf_marian"), dst, fs::copy_options::recursive);
  return dst;
}

void edit_json(const std::string& path, const std::function<void(json&)>& edit) {
  json j;
  {
    std::ifstream in(path);
    j = json::parse(in);
  }
  edit(j);
  std::ofstream(path) << j.dump(2);
}

std::string import_error(const std::string& dir) {
  return error_message_of([&] { interop::import_hf(dir, dir + "_out"); });
}

TEST(HfMarian, RefusesWhatQkvCannotComputeNamingTheField) {
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"layers", [](json& j) { j["decoder_layers"] = 3; }, {"config.json", "decoder_layers", "encoder_layers is 2"}},
      {"heads", [](json& j) { j["decoder_attention_heads"] = 8; }, {"decoder_attention_heads"}},
      {"ffn", [](json& j) { j["decoder_ffn_dim"] = 256; }, {"decoder_ffn_dim"}},
      {"act", [](json& j) { j["activation_function"] = "tanh"; }, {"activation_function", "\"tanh\""}},
      {"prenorm", [](json& j) { j["normalize_before"] = true; }, {"normalize_before", "not supported"}},
      {"embnorm", [](json& j) { j["layernorm_embedding"] = true; }, {"layernorm_embedding"}},
      {"nopad", [](json& j) { j.erase("pad_token_id"); }, {"pad_token_id", "missing"}},
      {"padrange", [](json& j) { j["pad_token_id"] = 1000; }, {"pad_token_id", "1000"}},
      {"vocab", [](json& j) { j["decoder_vocab_size"] = 100; }, {"decoder_vocab_size", "share_encoder_decoder_embeddings"}},
      {"type", [](json& j) { j["model_type"] = "pegasus"; }, {"model_type", "\"pegasus\"", "marian"}},
  };
  for (const Case& c : cases) {
    const std::string dir = copy_of(std::string("bad_") + c.name);
    edit_json(dir + "/config.json", c.edit);
    expect_contains(import_error(dir), c.expected);
    EXPECT_FALSE(fs::exists(dir + "_out")) << c.name << ": nothing is written";
  }
  const std::string bad_words = copy_of("bad_words");
  edit_json(bad_words + "/generation_config.json", [](json& j) { j["bad_words_ids"] = json::array({json::array({5, 6})}); });
  expect_contains(import_error(bad_words), {"generation_config.json", "bad_words_ids", "[[5,6]]"});
}

TEST(HfMarian, RefusesMismatchedTensorsAndTokenizers) {
  const std::string shape = copy_of("shape");
  {
    io::StFile f = io::read_safetensors(shape + "/model.safetensors");
    f.tensors.erase(std::remove_if(f.tensors.begin(), f.tensors.end(),
                                   [](const io::StTensor& t) { return t.name == "model.encoder.layers.1.fc2.bias"; }),
                    f.tensors.end());
    io::write_safetensors(shape + "/model.safetensors", f);
  }
  expect_contains(import_error(shape), {"model.safetensors", "encoder.layers.1.fc2.bias", "missing"});

  const std::string untied = copy_of("stray_head");  // a tied model storing a different lm_head
  {
    io::StFile f = io::read_safetensors(untied + "/model.safetensors");
    io::StTensor head = *std::find_if(f.tensors.begin(), f.tensors.end(),
                                      [](const io::StTensor& t) { return t.name == "model.shared.weight"; });
    head.name = "lm_head.weight";
    head.bytes[0] ^= 1;
    f.tensors.push_back(head);
    io::write_safetensors(untied + "/model.safetensors", f);
  }
  expect_contains(import_error(untied), {"lm_head.weight", "differs", "tie_word_embeddings"});

  const std::string no_pad = copy_of("vocab_no_pad");
  edit_json(no_pad + "/vocab.json", [](json& j) { j.erase("<pad>"); });
  expect_contains(import_error(no_pad), {"vocab.json", "<pad>"});

  const std::string twice = copy_of("vocab_twice");
  edit_json(twice + "/vocab.json", [](json& j) { j["extra"] = 0; });
  expect_contains(import_error(twice), {"vocab.json", "id 0 is given to both"});

  const std::string pickle = copy_of("pickle");  // an older OPUS-MT upload: pytorch_model.bin only
  fs::rename(pickle + "/model.safetensors", pickle + "/pytorch_model.bin");
  edit_json(pickle + "/config.json", [](json& j) { j["architectures"] = json::array({"MarianMTModel"}); });
  expect_contains(import_error(pickle), {"model.safetensors: missing", "pytorch_model.bin",
                                         "transformers.MarianMTModel.from_pretrained(", "safe_serialization=True"});

  const std::string bad_id = copy_of("vocab_bad_id");
  edit_json(bad_id + "/vocab.json", [](json& j) { j["extra"] = -3; });
  expect_contains(import_error(bad_id), {"vocab.json", "\"extra\"", "-3", "expected an integer"});

  const std::string bad_flag = copy_of("tokenizer_config_flag");
  edit_json(bad_flag + "/tokenizer_config.json", [](json& j) { j["clean_up_tokenization_spaces"] = "yes"; });
  expect_contains(import_error(bad_flag), {"tokenizer_config.json", "clean_up_tokenization_spaces", "true or false"});

  const std::string no_target = copy_of("no_target_spm");
  fs::remove(no_target + "/target.spm");
  expect_contains(import_error(no_target), {"target.spm", "missing"});
}

TEST(HfMarian, WithoutATokenizerTheCheckpointTakesIds) {
  const std::string dir = copy_of("no_tokenizer");
  for (const char* f : {"source.spm", "target.spm", "vocab.json"}) fs::remove(dir + "/" + f);
  const interop::HfConversion info = interop::import_hf(dir, dir + "_out");
  EXPECT_FALSE(info.tokenizer);
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes.back().find("token ids only"), std::string::npos);
  const api::Translator translator(dir + "_out");
  EXPECT_FALSE(translator.has_tokenizers());
  expect_contains(error_message_of([&] { (void)translator.translate({"Dios"}, {}); }), {"no tokenizer", "token ids"});
}

// Export gives back the tensors transformers wrote, byte for byte, with the tokenizer files.
TEST(HfMarian, ExportGivesBackTransformersTensors) {
  const std::string out = testing::expect_export_gives_back_tensors("hf_marian");
  for (const char* f : {"config.json", "generation_config.json", "source.spm", "target.spm", "vocab.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  const interop::HfConversion info = interop::export_hf(imported_checkpoint("hf_marian"), fresh_marian_dir("export"));
  EXPECT_EQ(info.model_type, "marian");
  EXPECT_EQ(info.hf_class, "MarianMTModel");
  EXPECT_TRUE(info.tokenizer);
}

TEST(HfMarian, ExportRefusesWhatMarianCannotExpress) {
  models::TransformerConfig seed;  // interleaved table, target query mask
  expect_contains(error_message_of([&] { (void)interop::hf_marian_config_json(seed); }),
                  {"positions \"sinusoidal\"", "sinusoidal_halves"});
  seed.positions = "sinusoidal_halves";
  expect_contains(error_message_of([&] { (void)interop::hf_marian_config_json(seed); }), {"target_query_mask"});
  seed.target_query_mask = false;
  seed.norm = models::NormPosition::Pre;
  expect_contains(error_message_of([&] { (void)interop::hf_marian_config_json(seed); }), {"pre-LN"});
  seed.norm = models::NormPosition::Post;
  seed.layer_norm_eps = 1e-6f;
  expect_contains(error_message_of([&] { (void)interop::hf_marian_config_json(seed); }), {"layer_norm_eps"});
  models::TransformerConfig bert = models::encoder_only_defaults();
  const std::string dir = fresh_marian_dir("bert_ckpt");
  models::save_model(dir, *models::make_model(bert, 1));
  expect_contains(error_message_of([&] { interop::export_hf(dir, dir + "_hf"); }), {"encoder-only", "GPT-2", "Marian"});
}

}  // namespace
}  // namespace qkv
