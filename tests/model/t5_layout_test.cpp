// The encoder-decoder with T5's options (models/config.h: positions "relative", layer_norm "rms",
// linear_bias false, scale_attention_scores false, gated_feed_forward, scale_decoder_output, and a
// head_dim whose heads do not split d_model), trained by qkv itself: the loss's gradient with
// respect to every kind of parameter the options add matches central finite differences, the
// incremental decoder (one position per step, its bias row only) gives the full forward's logits, a
// model learns a batch by heart, and bad option values are refused naming the field. Agreement with transformers' T5 is hf_t5_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "error_message.h"
#include "model/t5_layout_config.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/transformer.h"
#include "qkv/train/adam.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

models::TransformerConfig t5_config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 48;
  c.max_seq_length = 20;
  c.dropout = 0.f;
  return testing::with_t5_layout(c, 12);  // 4 heads of 12: a width of 48 beside d_model 32
}

// The loss alone (its backward's gradients are not read).
float loss_of(const models::Transformer& m, const data::SyntheticBatch& b) {
  return train::forward_backward(m, b.src, b.tgt).loss;
}

TEST(T5Layout, ParametersAreT5s) {
  models::Transformer m(t5_config(), 3);
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("encoder_position_bias.weight") && has("decoder_position_bias.weight"));
  EXPECT_TRUE(has("encoder_layers.0.feed_forward.fc_up.weight"));
  EXPECT_TRUE(has("encoder_norm.weight") && has("decoder_norm.weight"));
  for (const std::string& n : names)
    EXPECT_EQ(n.find(".bias"), std::string::npos) << n << ": T5's linears and norms have no biases";
  EXPECT_TRUE(m.named_buffers().empty()) << "no positional table is added";
  EXPECT_EQ(m.encoder_position_bias->weight.value().shape(), (Dims{8, 4}));
  EXPECT_EQ(m.decoder_layers[0]->cross_attn.W_q.weight.value().shape(), (Dims{48, 32}));
  EXPECT_EQ(m.decoder_layers[0]->cross_attn.W_o.weight.value().shape(), (Dims{32, 48}));
}

// Central differences of the float32 loss over a few elements of each kind of parameter.
TEST(T5Layout, GradientsMatchFiniteDifferences) {
  const models::TransformerConfig c = t5_config();
  models::Transformer m(c, 7);
  m.train();
  const data::SyntheticBatch b = data::synthetic_batch("copy", 3, 9, 24, 4, 0);
  m.zero_grad();
  train::forward_backward(m, b.src, b.tgt);
  // The gradients first: every loss_of below runs a backward that adds into them.
  std::map<std::string, std::vector<float>> grads;
  for (const auto& [name, p] : m.named_parameters()) grads[name] = p.grad().to_vector();
  int checked = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const bool wanted = name == "encoder_position_bias.weight" || name == "decoder_position_bias.weight" ||
                        name == "encoder_layers.1.norm1.weight" || name == "decoder_norm.weight" ||
                        name == "decoder_layers.0.feed_forward.fc_up.weight" ||
                        name == "decoder_layers.1.self_attn.W_q.weight" || name == "decoder_embedding.weight";
    if (!wanted) continue;
    const std::vector<float>& grad = grads[name];
    Tensor value = p.value();
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = (k * 7919 + 3) % value.numel();
      const float original = value.f32()[i], h = 1e-2f;
      value.f32()[i] = original + h;
      const double up = loss_of(m, b);
      value.f32()[i] = original - h;
      const double down = loss_of(m, b);
      value.f32()[i] = original;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[static_cast<size_t>(i)], fd, 2e-3 + 0.03 * std::fabs(fd)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7 * 4);
}

TEST(T5Layout, IncrementalDecodingEqualsTheFullForward) {
  models::Transformer m(t5_config(), 11);
  m.eval();
  NoGradGuard no_grad;
  const data::SyntheticBatch b = data::synthetic_batch("copy", 2, 8, 24, 5, 0);
  const Tensor tgt = b.tgt.narrow(1, 0, b.tgt.size(1) - 1);
  const models::Masks masks = m.generate_mask(b.src, tgt);
  const Var enc = m.encode(b.src, masks.src);
  const std::vector<float> full = m.decode(tgt, enc, masks).value().to_vector();  // (B, T, V)
  models::DecoderState st = m.start_decoding(enc, b.src, tgt.size(1));
  const int64_t B = tgt.size(0), T = tgt.size(1), V = 24;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> step = m.decode_step(tgt.narrow(1, t, 1).contiguous().reshape(Dims{B}), st).value().to_vector();
    for (int64_t r = 0; r < B; ++r)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(step[static_cast<size_t>(r * V + v)], full[static_cast<size_t>((r * T + t) * V + v)], 2e-5)
            << "row " << r << ", position " << t << ", id " << v;
  }
}

// One batch of the copy task, learned by heart: the whole model (bias tables, RMSNorm weights, the
// gated feed-forward) trains through the one training step. (The copy task itself needs absolute
// alignment, which relative positions give only slowly.)
TEST(T5Layout, LearnsABatchByHeart) {
  models::Transformer m(t5_config(), 13);
  m.train();
  train::AdamOptions o;
  o.lr = 1e-2;
  train::Adam adam(m.named_parameters(), o);
  float first = 0, last = 0;
  const data::SyntheticBatch b = data::synthetic_batch("copy", 8, 8, 24, 9, 0);
  for (int64_t step = 0; step < 100; ++step) {
    const float loss = train::train_step(m, adam, b.src, b.tgt).loss;
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, 0.2f * first) << "first loss " << first << ", last " << last;
}

TEST(T5Layout, BadOptionsAreRefusedNamingTheField) {
  const auto error_of = [](models::TransformerConfig c) {
    return test_support::error_message_of([&] { c.validate(); });
  };
  models::TransformerConfig c = t5_config();
  c.relative_attention_num_buckets = 2;
  EXPECT_NE(error_of(c).find("relative_attention_num_buckets"), std::string::npos) << error_of(c);
  c = t5_config();
  c.relative_attention_max_distance = 3;
  EXPECT_NE(error_of(c).find("relative_attention_max_distance"), std::string::npos) << error_of(c);
  c = models::decoder_only_defaults();
  c.layer_norm = "rms";  // T5's option, for encoder-decoder models only
  EXPECT_NE(error_of(c).find("layer_norm"), std::string::npos) << error_of(c);
  c = t5_config();
  c.head_dim = -1;
  EXPECT_NE(error_of(c).find("head_dim"), std::string::npos) << error_of(c);
  c.head_dim = 40000;
  EXPECT_NE(error_of(c).find("head_dim"), std::string::npos) << error_of(c);
  c = models::decoder_only_defaults();
  c.head_dim = 8;
  EXPECT_NE(error_of(c).find("head_dim is for encoder-decoder"), std::string::npos) << error_of(c);
  const std::string json_error = test_support::error_message_of([] {
    models::config_from_json(R"({"relative_attention_num_buckets": 16})", "config.json");
  });
  EXPECT_NE(json_error.find("relative_attention_num_buckets"), std::string::npos) << json_error;
  EXPECT_NE(json_error.find("\"relative\""), std::string::npos) << json_error;
  const std::string foreign = test_support::error_message_of([] {
    models::config_from_json(R"({"architecture": "decoder-only", "linear_bias": false})", "config.json");
  });
  EXPECT_NE(foreign.find("\"linear_bias\" does not apply"), std::string::npos) << foreign;
}

}  // namespace
}  // namespace qkv
