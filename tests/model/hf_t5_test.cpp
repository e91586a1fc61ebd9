// Hugging Face T5 -> qkv (interop/hf_t5.h), against T5ForConditionalGeneration models that
// `transformers` built and saved (tests/python/make_t5_refs.py) in the v1.0 layout (ReLU, output
// tied to the shared table and scaled) and the v1.1 layout (gated GELU, lm_head of its own):
// relative-position buckets identical to T5Attention's, per-pair log-probabilities within 1e-4
// relative of transformers', greedy output identical to model.generate (from ids, and from text
// through the imported spiece.model), beam search scoring as the teacher-forced forward, and
// refusals naming their file and field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "model/hf_import_refs.h"
#include "model/ref_dir.h"
#include "qkv/api/translator.h"
#include "qkv/interop/hf_import.h"
#include "qkv/interop/hf_t5.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/position_bias.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::test_support::error_message_of;

json t5_refs() { return testing::read_ref_json("hf_t5_refs.json"); }

std::string fresh_t5_dir(const std::string& name) { return testing::fresh_temp_dir("qkv_t5", name); }

using testing::decoder_lines;
using testing::expect_log_probs_match;
using testing::id_lines;

using testing::imported_checkpoint;

const char* const kT5Models[] = {"hf_t5", "hf_t5_v11"};

TEST(HfT5, BucketsEqualTransformers) {
  const json r = t5_refs();  // kept alive: a range over t5_refs()["buckets"] would read a destroyed temporary
  for (const json& setting : r["buckets"]) {
    const bool bidirectional = setting["bidirectional"].get<bool>();
    const int64_t n = setting["num_buckets"].get<int64_t>(), max_distance = setting["max_distance"].get<int64_t>();
    const std::vector<int32_t> want = setting["buckets"].get<std::vector<int32_t>>();
    for (int64_t offset = -300; offset <= 300; ++offset)
      ASSERT_EQ(nn::relative_position_bucket(offset, bidirectional, n, max_distance), want[static_cast<size_t>(offset + 300)])
          << "offset " << offset << ", bidirectional " << bidirectional << ", " << n << " buckets, max distance "
          << max_distance;
  }
}

TEST(HfT5, ConfigTakesT5sChoices) {
  const models::TransformerConfig v10 = interop::hf_t5_config(testing::ref_path("hf_t5"));
  EXPECT_EQ(v10.layer_norm, "rms");
  EXPECT_EQ(v10.positions, "relative");
  EXPECT_EQ(v10.relative_attention_num_buckets, 16);
  EXPECT_EQ(v10.relative_attention_max_distance, 20);
  EXPECT_FALSE(v10.scale_attention_scores || v10.linear_bias || v10.gated_feed_forward || v10.target_query_mask);
  EXPECT_TRUE(v10.tie_output_embedding && v10.scale_decoder_output && v10.share_embeddings);
  EXPECT_EQ(v10.activation, "relu");
  EXPECT_EQ(v10.norm, models::NormPosition::Pre);
  EXPECT_EQ(v10.pad_id, 0);
  EXPECT_EQ(v10.bos_id, 0);
  EXPECT_EQ(v10.eos_id, 1);
  const models::TransformerConfig v11 = interop::hf_t5_config(testing::ref_path("hf_t5_v11"));
  EXPECT_TRUE(v11.gated_feed_forward);
  EXPECT_EQ(v11.activation, "gelu_tanh");
  EXPECT_FALSE(v11.tie_output_embedding || v11.scale_decoder_output);
  EXPECT_EQ(v10.head_dim, 0) << "4 heads of 16 split d_model 64";
  EXPECT_EQ(v11.num_heads, 6);
  EXPECT_EQ(v11.head_dim, 16) << "6 heads of 16: a width of 96 beside d_model 64";
  EXPECT_EQ(v11.attention_width(), 96);
  // The choices survive config.json.
  const models::TransformerConfig back = models::config_from_json(models::config_to_json(v11), "config.json");
  EXPECT_EQ(back.layer_norm, "rms");
  EXPECT_EQ(back.positions, "relative");
  EXPECT_EQ(back.relative_attention_max_distance, 20);
  EXPECT_FALSE(back.scale_attention_scores || back.linear_bias);
  EXPECT_TRUE(back.gated_feed_forward);
  EXPECT_EQ(back.head_dim, 16);
}

TEST(HfT5, LogProbabilitiesEqualTransformers) {
  const json r = t5_refs();
  const std::vector<data::IdLine> src = id_lines(r["source_ids"]);
  for (const char* name : kT5Models) {
    auto model = models::load_model(imported_checkpoint(name));
    model->eval();
    const std::vector<data::IdLine> tgt = decoder_lines(r["target_ids"], model->config().bos_id);
    // Batched with padding: the relative bias and the masks must leave each row's numbers alone.
    const train::ScoreResult got = train::score(*model, src, tgt, 4);
    expect_log_probs_match(got.line_log_prob, r[name]["log_probs"], name);
  }
}

TEST(HfT5, GreedyOutputEqualsGenerate) {
  const json r = t5_refs();
  const int64_t limit = r["new_tokens"].get<int64_t>();
  for (const char* name : kT5Models) {
    ASSERT_GT(r[name]["min_top2_margin"].get<double>(), 1e-3);
    const api::Translator translator(imported_checkpoint(name));
    api::TranslationOptions o;
    o.search.beam_size = 1;
    o.search.max_length_ratio = 0;
    o.search.max_length_offset = limit;  // generate(max_new_tokens=N): N tokens, no EOS forced
    o.batch_size = 4;
    const auto got = translator.translate_ids(id_lines(r["source_ids"]), o);
    ASSERT_EQ(got.size(), r[name]["greedy_ids"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      std::vector<int32_t> want = r[name]["greedy_ids"][i].get<std::vector<int32_t>>();
      if (want.back() == 1) want.pop_back();  // qkv's output ends before EOS
      else ASSERT_EQ(static_cast<int64_t>(want.size()), limit) << name << " source " << i;
      EXPECT_EQ(got[i][0].tokens, want) << name << " source " << i;
    }
  }
}

TEST(HfT5, TextTranslationEqualsTokenizerGenerateDecode) {
  // The imported checkpoint carries spiece.model: qkv translate on text gives what transformers'
  // tokenizer, generate and decode give.
  const json r = t5_refs();
  const std::vector<std::string> texts = r["texts"].get<std::vector<std::string>>();
  for (const char* name : kT5Models) {
    EXPECT_TRUE(fs::exists(imported_checkpoint(name) + "/spiece.model")) << name;
    const api::Translator translator(imported_checkpoint(name));
    api::TranslationOptions o;
    o.search.beam_size = 1;
    o.search.max_length_ratio = 0;
    o.search.max_length_offset = r["new_tokens"].get<int64_t>();
    o.batch_size = 3;
    const auto got = translator.translate(texts, o);
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<int32_t> want = r[name]["text_greedy_ids"][i].get<std::vector<int32_t>>();
      if (want.back() == 1) want.pop_back();
      EXPECT_EQ(got[i][0].tokens, want) << name << ": " << texts[i];
      EXPECT_EQ(got[i][0].text, r[name]["text_greedy"][i].get<std::string>()) << name << ": " << texts[i];
    }
  }
}

TEST(HfT5, BeamSearchKeepsTheBiasOfEachPosition) {
  // Beam search reorders its cache rows by a map (attention_forward_mapped): the beams' decoding
  // must score as the teacher-forced forward does, which reads every position's bias in place.
  const json r = t5_refs();
  const api::Translator translator(imported_checkpoint("hf_t5_v11"));
  api::TranslationOptions o;
  o.search.beam_size = 4;
  o.search.length_penalty = 0;
  o.batch_size = 3;
  const std::vector<data::IdLine> src = id_lines(r["source_ids"]);
  const auto got = translator.translate_ids(src, o);
  auto model = models::load_model(imported_checkpoint("hf_t5_v11"));
  model->eval();
  for (size_t i = 0; i < got.size(); ++i) {
    data::IdLine tgt{0};
    tgt.insert(tgt.end(), got[i][0].tokens.begin(), got[i][0].tokens.end());
    tgt.push_back(1);
    const train::ScoreResult forced = train::score(*model, {src[i]}, {tgt}, 1);
    EXPECT_NEAR(got[i][0].log_prob, forced.line_log_prob[0], 1e-4 * std::max(1.0, std::fabs(forced.line_log_prob[0])))
        << "source " << i;
  }
}

TEST(HfT5, RefusesWhatQkvCannotExpress) {
  const std::string hf = testing::ref_path("hf_t5");
  const std::string dir = fresh_t5_dir("bad");
  const auto with_config = [&](const std::string& name, const std::string& from, const std::string& to) {
    fs::create_directories(dir + "/" + name);
    fs::copy_file(hf + "/model.safetensors", dir + "/" + name + "/model.safetensors");
    std::ifstream in(hf + "/config.json");
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(config.find(from), std::string::npos) << from;
    config.replace(config.find(from), from.size(), to);
    std::ofstream(dir + "/" + name + "/config.json") << config;
    return dir + "/" + name;
  };
  const auto expect_refused = [&](const std::string& d, const std::vector<std::string>& parts) {
    const std::string m = error_message_of([&] { interop::import_hf(d, dir + "/out"); });
    EXPECT_FALSE(m.empty());
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    EXPECT_FALSE(fs::exists(dir + "/out"));
  };
  expect_refused(with_config("dkv", "\"d_kv\": 16", "\"d_kv\": 20000"), {"config.json", "\"d_kv\"", "65536"});
  // A d_kv the weights do not have: the tensor is named.
  expect_refused(with_config("dkv_weights", "\"d_kv\": 16", "\"d_kv\": 8"), {"SelfAttention.q.weight"});
  expect_refused(with_config("depth", "\"num_decoder_layers\": 2", "\"num_decoder_layers\": 3"),
                 {"config.json", "\"num_decoder_layers\"", "not supported"});
  expect_refused(with_config("proj", "\"feed_forward_proj\": \"relu\"", "\"feed_forward_proj\": \"gated-tanh\""),
                 {"config.json", "\"feed_forward_proj\"", "gated-tanh"});
  // A model whose tensors do not match the config: the tensor is named.
  expect_refused(with_config("width", "\"d_ff\": 96", "\"d_ff\": 80"), {"DenseReluDense.wi.weight"});
}

}  // namespace
}  // namespace qkv
