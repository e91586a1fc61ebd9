// The decoder-only model's inference paths against its plain forward: prefill + step with the KV
// cache (left-padded batches of different prompt lengths, reordering rows) must give the logits of
// running the whole sequence through forward(). PyTorch agreement is gpt_agreement_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "qkv/models/causal_lm.h"

namespace qkv::models {
namespace {

TransformerConfig lm_config(const std::string& positions) {
  TransformerConfig c = decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 31;
  c.d_model = 24;
  c.num_heads = 3;
  c.num_layers = 2;
  c.d_ff = 40;
  c.max_seq_length = 20;
  c.positions = positions;
  c.bos_id = c.eos_id = 1;
  return c;
}

// Logits (V) of the token after `ids`, by the full forward.
std::vector<float> last_logits(const CausalLM& m, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty(Dims{1, static_cast<int64_t>(ids.size())}, DType::I32);
  std::copy(ids.begin(), ids.end(), t.i32());
  const Tensor logits = m.forward(t).value();
  const int64_t V = logits.size(2), T = logits.size(1);
  return std::vector<float>(logits.f32() + (T - 1) * V, logits.f32() + T * V);
}

float max_abs_diff(const float* a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

class CausalLmCache : public ::testing::TestWithParam<std::string> {};

TEST_P(CausalLmCache, PrefillAndStepsMatchTheFullForwardForLeftPaddedRows) {
  CausalLM model(lm_config(GetParam()), 3);
  model.eval();
  NoGradGuard no_grad;
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 2}, {1}, {1, 7, 7}};
  GenerationState st;
  Var logits = model.prefill(seqs, 6, st);
  const int64_t V = model.output_vocab_size();
  for (int step = 0; step < 6; ++step) {
    Tensor next = Tensor::empty(Dims{static_cast<int64_t>(seqs.size())}, DType::I32);
    for (size_t r = 0; r < seqs.size(); ++r) {
      EXPECT_LT(max_abs_diff(logits.value().f32() + r * V, last_logits(model, seqs[r])), 1e-5f)
          << "row " << r << " step " << step;
      next.i32()[r] = static_cast<int32_t>((step * 7 + r * 3 + 2) % V);  // any continuation
      seqs[r].push_back(next.i32()[r]);
    }
    if (step == 3) {  // drop row 1 and duplicate row 2, as finished rows and beams do
      model.reorder(st, {2, 0, 2});
      seqs = {seqs[2], seqs[0], seqs[2]};
      for (size_t r = 0; r < 3; ++r) next.i32()[r] = seqs[r].back();
    }
    logits = model.step(next, st);
  }
}

INSTANTIATE_TEST_SUITE_P(Positions, CausalLmCache, ::testing::Values("learned", "sinusoidal"));

// Compute type int8 (qkv generate --compute-type int8): the logits follow the float forward (of a
// model with the same weights and no compute type) within the quantisation error, and differ from
// it, so the int8 products are really the ones in use.
TEST(CausalLm, Int8PrefillAndStepsFollowTheFloatForward) {
  CausalLM model(lm_config("learned"), 5), float32(lm_config("learned"), 5);
  model.eval();
  float32.eval();
  NoGradGuard no_grad;
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 2}, {1, 7}};
  GenerationState st;
  model.set_compute_type(nn::ComputeType::Int8);
  Var logits = model.prefill(seqs, 4, st);
  const int64_t V = model.output_vocab_size();
  float largest_difference = 0;
  for (int step = 0; step < 4; ++step) {
    Tensor next = Tensor::empty(Dims{2}, DType::I32);
    for (size_t r = 0; r < seqs.size(); ++r) {
      const std::vector<float> exact = last_logits(float32, seqs[r]);
      float scale = 0;
      for (float v : exact) scale = std::max(scale, std::fabs(v));
      const float d = max_abs_diff(logits.value().f32() + r * V, exact);
      EXPECT_LT(d, 0.05f * scale) << "row " << r << " step " << step;
      largest_difference = std::max(largest_difference, d);
      next.i32()[r] = static_cast<int32_t>((step * 5 + r * 3 + 2) % V);
      seqs[r].push_back(next.i32()[r]);
    }
    logits = model.step(next, st);
  }
  EXPECT_GT(largest_difference, 1e-6f) << "int8 logits equal the float ones: the int8 weights were not used";
}

TEST(CausalLm, ContextLimitsAreRefusedWithTheNumbers) {
  CausalLM model(lm_config("learned"), 1);
  NoGradGuard no_grad;
  GenerationState st;
  try {
    model.prefill({std::vector<int32_t>(15, 2)}, 6, st);
    ADD_FAILURE() << "15 + 6 tokens fit a context of 20";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_length 20"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model.forward(Tensor::zeros(Dims{1, 21}, DType::I32)), Error);
  EXPECT_THROW(CausalLM(TransformerConfig{}, 1), Error);  // an encoder-decoder config
}

}  // namespace
}  // namespace qkv::models
