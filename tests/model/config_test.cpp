// config.json as a user might get it wrong: every bad field is refused naming the field (and the
// file), numbers out of range are reported as written, integer fields refuse fractions, a key given
// twice is refused, and a model too large to allocate is refused naming its largest part before any
// allocation. TransformerConfig::validate() applies the same bounds to configs built in code.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "qkv/core/error.h"
#include "qkv/models/config.h"
#include "error_message.h"

namespace qkv::models {
namespace {

// The message config_from_json throws for `json`, or "<accepted>".
std::string error_of(const std::string& json) {
  return test_support::error_message_of([&] { config_from_json(json, "config.json"); }, "<accepted>");
}

std::string error_of(const TransformerConfig& c) {
  return test_support::error_message_of([&] { c.validate(); }, "<accepted>");
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Config, IntegerFieldsRefuseFractionsAndAcceptIntegralNumbers) {
  EXPECT_EQ(error_of(R"({"d_model": 32.5})"), "config.json: field \"d_model\" must be an integer, got 32.5");
  EXPECT_TRUE(contains(error_of(R"({"num_layers": 1.000001})"), "\"num_layers\" must be an integer")) << error_of(R"({"num_layers": 1.000001})");
  // 32.0 and 3e1 are integers written as floats: read as 32 and 30.
  const TransformerConfig c = config_from_json(R"({"d_model": 32.0, "num_heads": 4, "d_ff": 3e1})", "config.json");
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.d_ff, 30);
}

TEST(Config, DuplicateKeysAreRefusedNamingTheKey) {
  EXPECT_EQ(error_of(R"({"d_model": 32, "num_heads": 4, "d_model": 64})"),
            "config.json: field \"d_model\" is given more than once");
  EXPECT_EQ(error_of(R"({"dropout": 0.1, "dropout": 0.1})"), "config.json: field \"dropout\" is given more than once");
}

TEST(Config, SizesOutOfRangeAreReportedAsWritten) {
  EXPECT_EQ(error_of(R"({"src_vocab_size": 1e12})"),
            "config.json: field \"src_vocab_size\" must be in [1, 16777216], got 1000000000000.0");
  const std::string two_to_63 = error_of(R"({"d_model": 9223372036854775808})");
  EXPECT_EQ(two_to_63, "config.json: field \"d_model\" must be in [1, 65536], got 9223372036854775808");
  EXPECT_FALSE(contains(two_to_63, "-9223372036854775808")) << two_to_63;
  EXPECT_EQ(error_of(R"({"tgt_vocab_size": 18446744073709551615})"),
            "config.json: field \"tgt_vocab_size\" must be in [1, 16777216], got 18446744073709551615");
  EXPECT_EQ(error_of(R"({"num_layers": -1})"), "config.json: field \"num_layers\" must be in [1, 1024], got -1");
  EXPECT_EQ(error_of(R"({"num_layers": 1025})"), "config.json: field \"num_layers\" must be in [1, 1024], got 1025");
  EXPECT_EQ(error_of(R"({"d_ff": 65537})"), "config.json: field \"d_ff\" must be in [1, 65536], got 65537");
  EXPECT_EQ(error_of(R"({"max_seq_length": 0})"),
            "config.json: field \"max_seq_length\" must be in [1, 1048576], got 0");
  EXPECT_EQ(error_of(R"({"max_seq_length": 1048577})"),
            "config.json: field \"max_seq_length\" must be in [1, 1048576], got 1048577");
  EXPECT_EQ(error_of(R"({"pad_id": -1})"), "config.json: field \"pad_id\" must be in [0, 16777215], got -1");
  EXPECT_EQ(error_of(R"({"num_heads": 1024, "d_model": 512})"),
            "config.json: config: num_heads 1024 must not exceed d_model 512");
}

TEST(Config, NonNumbersAndNonFiniteNumbersAreRefusedNamingTheField) {
  EXPECT_EQ(error_of(R"({"dropout": "nan"})"),
            "config.json: field \"dropout\" has the wrong type (\"nan\"), expected a number");
  EXPECT_EQ(error_of(R"({"layer_norm_eps": "inf"})"),
            "config.json: field \"layer_norm_eps\" has the wrong type (\"inf\"), expected a number");
  EXPECT_EQ(error_of(R"({"d_model": "512"})"),
            "config.json: field \"d_model\" has the wrong type (\"512\"), expected an integer");
  EXPECT_EQ(error_of(R"({"num_heads": true})"),
            "config.json: field \"num_heads\" has the wrong type (true), expected an integer");
  EXPECT_EQ(error_of(R"({"layer_norm_eps": 1e39})"),  // finite as a double, infinite as a float
            "config.json: field \"layer_norm_eps\" must be a finite number, got 1e+39");
  const std::string overflow = error_of(R"({"attention_dropout": 1e999})");
  EXPECT_TRUE(contains(overflow, "config.json: not valid JSON")) << overflow;
  EXPECT_TRUE(contains(overflow, "1e999")) << overflow;
  EXPECT_TRUE(contains(error_of(R"({"dropout": NaN})"), "config.json: not valid JSON")) << error_of(R"({"dropout": NaN})");
  EXPECT_EQ(error_of(R"({"dropout": 1.5})"), "config.json: config: dropout must be in [0, 1), got 1.5");
}

TEST(Config, ModelsTooLargeToAllocateAreRefusedNamingTheLargestPart) {
  const std::string vocab = error_of(
      R"({"src_vocab_size": 16777216, "tgt_vocab_size": 16777216, "d_model": 65536, "num_heads": 1})");
  EXPECT_TRUE(contains(vocab, "more than the 17179869184 (2^34, 64 GiB) allowed")) << vocab;
  EXPECT_TRUE(contains(vocab, "the largest part comes from tgt_vocab_size 16777216 x d_model 65536")) << vocab;
  const std::string layers = error_of(
      R"({"src_vocab_size": 10, "tgt_vocab_size": 10, "d_model": 65536, "num_heads": 1, "d_ff": 65536, "num_layers": 1024})");
  EXPECT_TRUE(contains(layers, "the largest part comes from num_layers 1024 x (d_model 65536, d_ff 65536)")) << layers;
  // Seed 000's model and a wide one well inside the limit load.
  EXPECT_EQ(error_of("{}"), "<accepted>");
  EXPECT_EQ(error_of(R"({"src_vocab_size": 32000, "tgt_vocab_size": 32000, "d_model": 1024, "num_heads": 16, "d_ff": 4096})"),
            "<accepted>");
}

TEST(Config, ValidateAppliesTheSameBoundsToConfigsBuiltInCode) {
  TransformerConfig c;
  c.max_seq_length = 0;  // used to surface as "sinusoidal_table: bad sizes"
  EXPECT_EQ(error_of(c), "config: max_seq_length must be in [1, 1048576], got 0");
  c = TransformerConfig();
  c.src_vocab_size = int64_t{1} << 40;
  EXPECT_EQ(error_of(c), "config: src_vocab_size must be in [1, 16777216], got 1099511627776");
  c = TransformerConfig();
  c.layer_norm_eps = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(contains(error_of(c), "layer_norm_eps must be a positive finite number")) << error_of(c);
  c = TransformerConfig();
  c.dropout = std::nanf("");
  EXPECT_TRUE(contains(error_of(c), "config: dropout must be in [0, 1)")) << error_of(c);
  c = TransformerConfig();
  c.attention_dropout = -0.5f;
  EXPECT_TRUE(contains(error_of(c), "config: attention_dropout must be in [0, 1)")) << error_of(c);
}

}  // namespace
}  // namespace qkv::models

namespace qkv::models {
namespace {
TEST(Config, ArchitectureAndFormatVersion) {
  const TransformerConfig c = config_from_json("{}", "config.json");
  EXPECT_EQ(c.architecture, "encoder-decoder");  // configs written before the field read unchanged
  const std::string written = config_to_json(c);
  EXPECT_NE(written.find("\"architecture\": \"encoder-decoder\""), std::string::npos) << written;
  EXPECT_NE(written.find("\"format_version\": 1"), std::string::npos) << written;
  EXPECT_EQ(config_from_json(written, "config.json").architecture, "encoder-decoder");
  auto error = [](const std::string& json) -> std::string {
    try {
      config_from_json(json, "config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(R"({"format_version": 2})").find("format_version 2 is newer than this qkv reads (1)"),
            std::string::npos);
  EXPECT_NE(error(R"({"format_version": "1"})").find("\"format_version\" must be a positive integer"),
            std::string::npos);
  const std::string deep = "{\"d_model\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_NE(error(deep).find("nested more than 16 levels deep"), std::string::npos);  // was a stack overflow
  EXPECT_NE(error(R"({"architecture": "seq2seq"})").find("architecture \"seq2seq\" is not supported"),
            std::string::npos);
}

TEST(Config, DecoderOnlyHasGpt2DefaultsAndRefusesTheOtherFamilysFields) {
  const TransformerConfig c =
      config_from_json(R"({"architecture": "decoder-only", "vocab_size": 50, "pad_id": -1})", "config.json");
  EXPECT_TRUE(c.decoder_only());
  EXPECT_EQ(c.tgt_vocab_size, 50);
  EXPECT_EQ(c.src_vocab_size, 50);
  EXPECT_EQ(c.norm, NormPosition::Pre);
  EXPECT_EQ(c.activation, "gelu_tanh");
  EXPECT_EQ(c.positions, "learned");
  EXPECT_TRUE(c.tie_output_embedding);
  EXPECT_EQ(c.pad_id, -1);
  // Round trip: written with vocab_size and positions, without the encoder-decoder fields.
  const std::string written = config_to_json(c);
  EXPECT_FALSE(contains(written, "src_vocab_size")) << written;
  EXPECT_FALSE(contains(written, "\"norm\"")) << written;
  EXPECT_EQ(config_to_json(config_from_json(written, "config.json")), written);
  EXPECT_EQ(error_of(R"({"architecture": "decoder-only", "src_vocab_size": 50})"),
            "config.json: field \"src_vocab_size\" does not apply to a decoder-only model");
  EXPECT_EQ(error_of(R"({"architecture": "decoder-only", "norm": "post"})"),
            "config.json: field \"norm\" does not apply to a decoder-only model (decoder-only models are always "
            "pre-LN)");
  EXPECT_EQ(error_of(R"({"vocab_size": 50})"), "config.json: field \"vocab_size\" does not apply to an encoder-decoder model");
  EXPECT_EQ(error_of(R"({"positions": "rotary"})"),
            "config.json: config: positions \"rotary\" is not one of an encoder-decoder model's (\"sinusoidal\", "
            "\"sinusoidal_halves\", \"sinusoidal_fairseq\", \"relative\", \"learned\")");
  EXPECT_TRUE(contains(error_of(R"({"pad_id": -1})"), "\"pad_id\" must be in [0,")) << error_of(R"({"pad_id": -1})");
  EXPECT_TRUE(contains(error_of(R"({"architecture": "decoder-only", "positions": "rotary"})"),
                       "positions must be \"sinusoidal\" or \"learned\""));
  EXPECT_TRUE(contains(error_of(R"({"architecture": "decoder-only", "vocab_size": 50, "eos_id": 50})"), "eos_id"));
}

// Marian's options (interop/hf_marian.h): written only when they leave the seed's choice, read
// back, and refused in the families they do not apply to.
TEST(Config, EncoderDecoderTakesMariansPositionsAndTargetMask) {
  const TransformerConfig seed;
  EXPECT_FALSE(contains(config_to_json(seed), "positions")) << "the seed's config.json keeps its bytes";
  EXPECT_FALSE(contains(config_to_json(seed), "target_query_mask"));
  const TransformerConfig marian = config_from_json(
      R"({"positions": "sinusoidal_halves", "target_query_mask": false, "activation": "silu"})", "config.json");
  EXPECT_EQ(marian.positions, "sinusoidal_halves");
  EXPECT_FALSE(marian.target_query_mask);
  EXPECT_EQ(marian.activation, "silu");
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(marian), "config.json")), config_to_json(marian));
  EXPECT_EQ(error_of(R"({"architecture": "decoder-only", "target_query_mask": false})"),
            "config.json: field \"target_query_mask\" does not apply to a decoder-only model");
  EXPECT_TRUE(contains(error_of(R"({"architecture": "decoder-only", "positions": "sinusoidal_halves"})"),
                       "positions must be \"sinusoidal\" or \"learned\""));
  EXPECT_TRUE(contains(error_of(R"({"target_query_mask": 0})"), "\"target_query_mask\" has the wrong type"));
  EXPECT_TRUE(contains(error_of(R"({"activation": "swish"})"), "\"silu\""));
}

}  // namespace
}  // namespace qkv::models
