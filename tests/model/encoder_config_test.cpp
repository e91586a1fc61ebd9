// config.json of an encoder-only (BERT) model: BERT's defaults, a round trip through JSON, the
// fields of other families refused by name (and this family's fields refused in them), and bad
// values of its own fields named.
#include <gtest/gtest.h>

#include <string>

#include "qkv/core/error.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/config.h"
#include "error_message.h"

namespace qkv::models {
namespace {

std::string encoder_config_error_of(const std::string& json) {
  return test_support::error_message_of([&] { config_from_json(json, "config.json"); }, "<accepted>");
}

bool message_contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

TEST(EncoderConfig, DefaultsAreBertsAndRoundTrip) {
  const TransformerConfig c = config_from_json(R"({"architecture": "encoder-only", "vocab_size": 120, "d_model": 32,
      "num_heads": 4, "num_layers": 2, "d_ff": 64, "cls_id": 5, "sep_id": 6, "mask_id": 7, "labels": ["a", "b"]})",
                                               "config.json");
  EXPECT_TRUE(c.encoder_only());
  EXPECT_EQ(c.norm, NormPosition::Post);
  EXPECT_EQ(c.activation, "gelu");
  EXPECT_EQ(c.positions, "learned");
  EXPECT_EQ(c.max_seq_length, 512);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-12f);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_TRUE(c.pooler && c.mlm_head && c.tie_output_embedding);
  EXPECT_EQ(c.src_vocab_size, 120);
  EXPECT_EQ(c.tgt_vocab_size, 120);
  const TransformerConfig back = config_from_json(config_to_json(c), "again.json");
  EXPECT_EQ(config_to_json(back), config_to_json(c));
  EXPECT_EQ(back.labels, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(back.mask_id, 7);
  const std::string json = config_to_json(c);
  for (const char* absent : {"src_vocab_size", "bos_id", "eos_id", "\"norm\""}) EXPECT_FALSE(message_contains(json, absent)) << absent;
  // The model it describes builds, with a head per option.
  auto model = make_model(c, 1);
  auto* encoder = dynamic_cast<EncoderModel*>(model.get());
  ASSERT_NE(encoder, nullptr);
  EXPECT_NE(encoder->pooler, nullptr);
  EXPECT_NE(encoder->mlm_head, nullptr);
  EXPECT_NE(encoder->classifier, nullptr);
}

TEST(EncoderConfig, OtherFamiliesFieldsAreRefusedByName) {
  const std::string enc = R"("architecture": "encoder-only", "vocab_size": 50, )";
  EXPECT_TRUE(message_contains(encoder_config_error_of("{" + enc + R"("bos_id": 2})"), "\"bos_id\" does not apply to an encoder-only model"));
  EXPECT_TRUE(message_contains(encoder_config_error_of("{" + enc + R"("src_vocab_size": 50})"), "\"src_vocab_size\""));
  EXPECT_TRUE(message_contains(encoder_config_error_of("{" + enc + R"("norm": "pre"})"), "encoder-only models are post-LN"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(R"({"labels": ["x"]})"), "\"labels\" does not apply to an encoder-decoder model"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(R"({"architecture": "decoder-only", "mask_id": 3})"),
                       "\"mask_id\" does not apply to a decoder-only model"));
}

TEST(EncoderConfig, BadValuesAreNamed) {
  const std::string enc = R"({"architecture": "encoder-only", "vocab_size": 50, )";
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("cls_id": 50})"), "cls_id 50"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("mask_id": -2})"), "mask_id"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("labels": ["a", "a"]})"), "label \"a\" is given twice"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("labels": ["a\tb"]})"), "no tab"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("labels": "a"})"), "\"labels\" has the wrong type"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("labels": ["a"], "pooler": false})"), "set pooler true"));
  EXPECT_TRUE(message_contains(encoder_config_error_of(enc + R"("type_vocab_size": 5000})"), "type_vocab_size"));
  EXPECT_EQ(encoder_config_error_of(enc + R"("type_vocab_size": 0, "mask_id": -1, "pad_id": -1})"), "<accepted>");
}

}  // namespace
}  // namespace qkv::models
