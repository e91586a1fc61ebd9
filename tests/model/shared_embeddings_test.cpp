// share_embeddings (config.json; `qkv train --share-all-embeddings` sets it with
// tie_output_embedding): the encoder's token embedding is the decoder's matrix. The shared matrix
// is one parameter under two names, its gradient is the sum of what the two lookups give an untied
// model holding the same values, training keeps the two names equal, and checkpoints round-trip
// (a tied config over untied weights is refused naming the field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/transformer.h"
#include "qkv/train/step.h"
#include "error_message.h"

namespace qkv {
namespace {
namespace fs = std::filesystem;

models::TransformerConfig tiny_config(bool shared) {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 1;
  c.d_ff = 32;
  c.max_seq_length = 16;
  c.dropout = 0.f;
  c.share_embeddings = shared;
  return c;
}

Var parameter(const models::Transformer& m, const std::string& name) {  // a handle: shares the cell
  for (const auto& [n, v] : m.named_parameters())
    if (n == name) return v;
  throw Error("no parameter " + name);
}

using qkv::test_support::error_message_of;

TEST(SharedEmbeddings, OneParameterUnderTwoNames) {
  const models::Transformer shared(tiny_config(true), 1), untied(tiny_config(false), 1);
  EXPECT_EQ(parameter(shared, "encoder_embedding.weight").cell(), parameter(shared, "decoder_embedding.weight").cell());
  EXPECT_EQ(shared.named_parameters().size(), untied.named_parameters().size());  // both names listed, as a state_dict
  EXPECT_EQ(shared.parameters().size() + 1, untied.parameters().size());         // one matrix fewer to train
}

// The gradient of the shared matrix is the encoder lookup's plus the decoder lookup's: an untied
// model with the same values in both tables gives the same loss and those two gradients.
TEST(SharedEmbeddings, GradientIsTheSumOfBothLookups) {
  models::Transformer shared(tiny_config(true), 4), untied(tiny_config(false), 4);
  for (auto& [name, var] : untied.named_parameters()) var.value().copy_from(parameter(shared, name).value());
  const data::SyntheticBatch b = data::synthetic_batch("random", 3, 9, 24, 2, 0);
  shared.zero_grad();
  untied.zero_grad();
  const double loss_shared = train::forward_backward(shared, b.src, b.tgt).loss;
  const double loss_untied = train::forward_backward(untied, b.src, b.tgt).loss;
  EXPECT_EQ(loss_shared, loss_untied);
  const std::vector<float> g = parameter(shared, "decoder_embedding.weight").grad().to_vector();
  const std::vector<float> enc = parameter(untied, "encoder_embedding.weight").grad().to_vector();
  const std::vector<float> dec = parameter(untied, "decoder_embedding.weight").grad().to_vector();
  ASSERT_EQ(g.size(), enc.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(g[i]) - (static_cast<double>(enc[i]) + dec[i])));
    largest = std::max(largest, std::abs(static_cast<double>(g[i])));
  }
  EXPECT_GT(largest, 1e-4);                // both lookups pass gradient
  EXPECT_LE(worst, 1e-6 * largest);        // the sum, up to the order of accumulation
  // The other parameters see the same arithmetic as the untied model.
  EXPECT_EQ(parameter(shared, "fc.weight").grad().to_vector(), parameter(untied, "fc.weight").grad().to_vector());
}

TEST(SharedEmbeddings, CheckpointsRoundTripAndUntiedWeightsAreRefused) {
  const std::string dir = ::testing::TempDir() + "/qkv_shared_emb_" + std::to_string(::getpid());
  fs::remove_all(dir);
  models::TransformerConfig c = tiny_config(true);
  c.tie_output_embedding = true;  // all three: the source, target and output embeddings
  models::Transformer model(c, 6);
  models::save_model(dir, model);
  const std::unique_ptr<models::Transformer> back = models::load_seq2seq(dir);
  EXPECT_TRUE(back->config().share_embeddings);
  EXPECT_EQ(parameter(*back, "encoder_embedding.weight").cell(), parameter(*back, "fc.weight").cell());
  EXPECT_EQ(parameter(*back, "encoder_embedding.weight").value().to_vector(),
            parameter(model, "decoder_embedding.weight").value().to_vector());

  models::Transformer untied(tiny_config(false), 6);
  models::save_model(dir, untied);
  models::save_config(dir + "/config.json", tiny_config(true));
  EXPECT_NE(error_message_of([&] { models::load_seq2seq(dir); })
                .find("config says share_embeddings: true, but 'decoder_embedding.weight' differs from "
                      "'encoder_embedding.weight'"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(SharedEmbeddings, ConfigRoundTripsAndIsRefusedWhereItCannotApply) {
  const models::TransformerConfig back =
      models::config_from_json(models::config_to_json(tiny_config(true)), "config.json");
  EXPECT_TRUE(back.share_embeddings);
  EXPECT_FALSE(models::config_from_json("{}", "config.json").share_embeddings);  // configs written before it
  const auto config_error = [](const std::string& json) {
    return error_message_of([&] { models::config_from_json(json, "config.json"); });
  };
  EXPECT_EQ(config_error(R"({"share_embeddings": true, "src_vocab_size": 30})"),
            "config.json: config: share_embeddings needs one joint vocabulary, but src_vocab_size is 30 and "
            "tgt_vocab_size 5000");
  EXPECT_EQ(config_error(R"({"architecture": "decoder-only", "share_embeddings": true})"),
            "config.json: field \"share_embeddings\" does not apply to a decoder-only model (it has one token "
            "embedding)");
  models::TransformerConfig lm = models::decoder_only_defaults();
  lm.share_embeddings = true;
  EXPECT_EQ(error_message_of([&] { lm.validate(); }),
            "config: share_embeddings is for encoder-decoder models (a decoder-only model has one token embedding)");
}

double spread(const Tensor& t) {  // root mean square of the values
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += static_cast<double>(t.f32()[i]) * t.f32()[i];
  return std::sqrt(sum / static_cast<double>(t.numel()));
}

// A table that is also the output layer starts at N(0, 1 / d_model), as fairseq's: the first logits
// then spread about as much as the decoder state, not sqrt(d_model) times it. The draws are the
// untied table's, scaled, so every value drawn after them is the same.
TEST(SharedEmbeddings, ATableTiedToTheOutputStartsAtOneOverSqrtDModel) {
  models::TransformerConfig tied = tiny_config(true), untied = tiny_config(false);
  tied.d_model = untied.d_model = 64;
  tied.num_heads = untied.num_heads = 4;
  tied.src_vocab_size = tied.tgt_vocab_size = untied.src_vocab_size = untied.tgt_vocab_size = 400;
  tied.tie_output_embedding = true;
  const models::Transformer a(tied, 7), b(untied, 7);
  const Var tied_table = parameter(a, "decoder_embedding.weight"), plain_table = parameter(b, "decoder_embedding.weight");
  const Tensor &table = tied_table.value(), &plain = plain_table.value();
  EXPECT_EQ(parameter(a, "fc.weight").cell(), parameter(a, "decoder_embedding.weight").cell());
  EXPECT_NEAR(spread(table), 1.0 / 8.0, 0.01);
  EXPECT_NEAR(spread(plain), 1.0, 0.05);
  for (int64_t i = 0; i < table.numel(); i += 997) EXPECT_EQ(table.f32()[i], plain.f32()[i] * 0.125f) << i;
  const Var later_a_var = parameter(a, "decoder_layers.0.feed_forward.fc2.weight");
  const Var later_b_var = parameter(b, "decoder_layers.0.feed_forward.fc2.weight");
  const Tensor &later_a = later_a_var.value(), &later_b = later_b_var.value();
  EXPECT_EQ(std::memcmp(later_a.f32(), later_b.f32(), later_a.numel() * sizeof(float)), 0);
}

}  // namespace
}  // namespace qkv
