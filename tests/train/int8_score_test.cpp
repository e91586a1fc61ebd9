// Scoring in int8 (`qkv score --quantize int8`): every linear layer runs through int8 packs, and
// the log-probabilities follow the float32 ones within the quantisation error, for the
// encoder-decoder and the decoder-only family. They also differ from them, so the int8 products
// are really the ones in use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "qkv/models/causal_lm.h"
#include "qkv/models/transformer.h"
#include "qkv/train/step.h"

namespace qkv::train {
namespace {

std::vector<data::IdLine> id_lines(int n, int vocab, int min_len, int salt) {
  std::vector<data::IdLine> lines;
  for (int i = 0; i < n; ++i) {
    data::IdLine l = {1};  // BOS
    for (int t = 0; t < min_len + i % 5; ++t) l.push_back(3 + (i * 7 + t * 5 + salt) % (vocab - 3));
    l.push_back(2);  // EOS
    lines.push_back(l);
  }
  return lines;
}

// Per line: |int8 - float| <= 3% of |float| (each line sums ~10 token log-probabilities of an
// untrained model, about -3 each); and some line differs at all.
void expect_close_but_int8(const ScoreResult& f, const ScoreResult& q) {
  ASSERT_EQ(f.line_log_prob.size(), q.line_log_prob.size());
  EXPECT_EQ(f.tokens, q.tokens);
  double largest = 0;
  for (size_t i = 0; i < f.line_log_prob.size(); ++i) {
    const double d = std::abs(f.line_log_prob[i] - q.line_log_prob[i]);
    EXPECT_LE(d, 0.03 * std::abs(f.line_log_prob[i])) << "line " << i << ": " << f.line_log_prob[i] << " vs "
                                                      << q.line_log_prob[i];
    largest = std::max(largest, d);
  }
  EXPECT_GT(largest, 1e-6) << "int8 scores equal the float ones: the packs were not used";
}

TEST(Int8Score, EncoderDecoderFollowsFloat32) {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 30;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 32;
  models::Transformer model(c, 3);
  model.eval();
  const auto src = id_lines(12, 30, 6, 1), tgt = id_lines(12, 30, 5, 4);
  const ScoreResult f = score(model, src, tgt, 5);
  model.set_compute_type(nn::ComputeType::Int8);
  expect_close_but_int8(f, score(model, src, tgt, 5));
}

TEST(Int8Score, DecoderOnlyFollowsFloat32) {
  models::TransformerConfig c = models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 30;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 32;
  c.bos_id = 1;
  c.eos_id = 2;
  models::CausalLM model(c, 5);
  model.eval();
  const auto lines = id_lines(12, 30, 6, 2);
  const ScoreResult f = score(model, {}, lines, 5);
  model.set_compute_type(nn::ComputeType::Int8);
  expect_close_but_int8(f, score(model, {}, lines, 5));
}

}  // namespace
}  // namespace qkv::train
