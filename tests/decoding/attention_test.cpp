// Attention weights captured while decoding (decoding/attention.h): for greedy and beam search over
// a Transformer and for generation with a CausalLM, every captured row is a softmax (sums to 1,
// zero on the keys it cannot see), and the weights equal those of one teacher-forced pass over the
// output (Transformer::encode / decode and CausalLM::forward with weights), so they are the
// numbers of the decoded sequence itself: for beam search, each returned hypothesis' own history
// traced through the beam reorderings, the best one first. Off (the default), nothing is kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "decoding/small_causal_lm.h"
#include "qkv/autograd/graph.h"
#include "qkv/decoding/generate.h"
#include "qkv/decoding/search.h"
#include "qkv/kernels/random.h"

namespace qkv {
namespace {

using Tokens = std::vector<int32_t>;
constexpr float kTol = 2e-5f;

// Random weights of a larger range than PyTorch's initialisation, so that outputs vary in length
// and beams disagree (norms kept).
template <class M>
void shake(M& m, uint64_t seed, float range) {
  uint64_t counter = 0;
  for (auto& [name, p] : m.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    Tensor t = p.value();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = range * (kernels::uniform01(seed, counter++) - 0.5f);
  }
  m.eval();
}

std::unique_ptr<models::Transformer> translator() {
  models::TransformerConfig c;
  c.src_vocab_size = 24;
  c.tgt_vocab_size = 20;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 32;
  c.dropout = 0.f;
  auto m = std::make_unique<models::Transformer>(c, 11);
  shake(*m, 11, 0.5f);
  return m;
}

const std::vector<data::IdLine> kSources = {{4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 4, 20, 21}, {15, 3}, {7}};

// (H, Q, K) slice `row` of a (B, H, Q, K) tensor, copied.
Tensor row_of(const Tensor& w, int64_t row) { return w.slice0(row, row + 1).contiguous().reshape(Dims{w.size(1), w.size(2), w.size(3)}); }

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  float worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::fabs(got.f32()[i] - want.f32()[i]));
  EXPECT_LT(worst, kTol) << what;
}

// Every (H, Q, K) row sums to 1; with `causal`, query q sees keys 0..q only (the rest exactly 0).
void expect_softmax_rows(const Tensor& w, bool causal, const std::string& what) {
  const int64_t H = w.size(0), Q = w.size(1), K = w.size(2);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t q = 0; q < Q; ++q) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float v = w.f32()[(h * Q + q) * K + k];
        EXPECT_GE(v, 0.f) << what;
        if (causal && k > q) {
          EXPECT_EQ(v, 0.f) << what << " head " << h << " query " << q << " key " << k;
        }
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << what << " head " << h << " query " << q;
    }
}

// The weights of one teacher-forced pass over (source, [BOS] + tokens), which chose tokens + EOS.
decoding::AttentionWeights teacher_forced(const models::Transformer& m, const data::IdLine& src, const Tokens& tokens) {
  NoGradGuard no_grad;
  Tokens input{m.config().bos_id};
  input.insert(input.end(), tokens.begin(), tokens.end());
  const Tensor s = Tensor::from_ids(Dims{1, static_cast<int64_t>(src.size())}, src);
  const Tensor t = Tensor::from_ids(Dims{1, static_cast<int64_t>(input.size())}, input);
  const models::Masks masks = m.generate_mask(s, t);
  std::vector<Tensor> enc_w, self_w, cross_w;
  const Var enc = m.encode(s, masks.src, &enc_w);
  m.decode(t, enc, masks, &self_w, &cross_w);
  decoding::AttentionWeights a;
  for (const Tensor& w : enc_w) a.encoder_self.push_back(row_of(w, 0));
  for (const Tensor& w : self_w) a.decoder_self.push_back(row_of(w, 0));
  for (const Tensor& w : cross_w) a.cross.push_back(row_of(w, 0));
  return a;
}

void expect_hypothesis_weights(const models::Transformer& m, const data::IdLine& src, const decoding::Hypothesis& h,
                               const std::string& what) {
  const decoding::AttentionWeights& a = h.attention;
  const size_t L = static_cast<size_t>(m.config().num_layers);
  ASSERT_EQ(a.encoder_self.size(), L) << what;
  ASSERT_EQ(a.decoder_self.size(), L) << what;
  ASSERT_EQ(a.cross.size(), L) << what;
  const int64_t H = m.config().num_heads, S = static_cast<int64_t>(src.size()),
                T = static_cast<int64_t>(h.tokens.size()) + 1;
  const decoding::AttentionWeights want = teacher_forced(m, src, h.tokens);
  for (size_t l = 0; l < L; ++l) {
    const std::string at = what + " layer " + std::to_string(l);
    EXPECT_EQ(a.encoder_self[l].shape(), (Dims{H, S, S})) << at;
    EXPECT_EQ(a.decoder_self[l].shape(), (Dims{H, T, T})) << at;
    EXPECT_EQ(a.cross[l].shape(), (Dims{H, T, S})) << at;
    expect_softmax_rows(a.encoder_self[l], false, at + " encoder self");
    expect_softmax_rows(a.decoder_self[l], true, at + " decoder self");
    expect_softmax_rows(a.cross[l], false, at + " cross");
    expect_close(a.encoder_self[l], want.encoder_self[l], at + " encoder self vs teacher-forced");
    expect_close(a.decoder_self[l], want.decoder_self[l], at + " decoder self vs teacher-forced");
    expect_close(a.cross[l], want.cross[l], at + " cross vs teacher-forced");
  }
}

TEST(DecodingAttention, GreedyWeightsAreSoftmaxRowsEqualToATeacherForcedPass) {
  const auto m = translator();
  decoding::SearchOptions o;
  o.attention = true;
  const auto hyps = decoding::greedy_search(*m, kSources, o);
  ASSERT_EQ(hyps.size(), kSources.size());
  for (size_t i = 0; i < hyps.size(); ++i) expect_hypothesis_weights(*m, kSources[i], hyps[i], "sentence " + std::to_string(i));
  // Without the key/value cache (the whole prefix each step) the same weights come out.
  o.use_cache = false;
  const auto uncached = decoding::greedy_search(*m, kSources, o);
  for (size_t i = 0; i < hyps.size(); ++i) {
    ASSERT_EQ(uncached[i].tokens, hyps[i].tokens);
    for (size_t l = 0; l < hyps[i].attention.cross.size(); ++l) {
      expect_close(uncached[i].attention.cross[l], hyps[i].attention.cross[l], "uncached cross");
      expect_close(uncached[i].attention.decoder_self[l], hyps[i].attention.decoder_self[l], "uncached self");
    }
  }
}

TEST(DecodingAttention, BeamSearchGivesEachHypothesisItsOwnWeights) {
  const auto m = translator();
  decoding::SearchOptions o;
  o.beam_size = 4;
  o.n_best = 4;
  o.attention = true;
  const auto results = decoding::beam_search(*m, kSources, o);
  ASSERT_EQ(results.size(), kSources.size());
  size_t distinct_prefixes = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_GE(results[i].size(), 2u);
    for (size_t j = 0; j < results[i].size(); ++j)
      expect_hypothesis_weights(*m, kSources[i], results[i][j], "sentence " + std::to_string(i) + " hypothesis " + std::to_string(j));
    // Hypotheses that part ways before their last token ran through different beams for a while,
    // which the reorderings after each step moved about.
    for (size_t j = 1; j < results[i].size(); ++j) {
      const Tokens &a = results[i][0].tokens, &b = results[i][j].tokens;
      const size_t shared = std::min(a.size(), b.size());
      for (size_t p = 0; p + 1 < shared; ++p)
        if (a[p] != b[p]) {
          ++distinct_prefixes;
          break;
        }
    }
  }
  EXPECT_GT(distinct_prefixes, 0u) << "no two hypotheses that part ways before their last token";
  // n_best 1: the best hypothesis and its weights, the same as the first of the n-best list.
  o.n_best = 1;
  const auto best = decoding::beam_search(*m, kSources, o);
  for (size_t i = 0; i < best.size(); ++i) {
    ASSERT_EQ(best[i].size(), 1u);
    ASSERT_EQ(best[i][0].tokens, results[i][0].tokens);
    for (size_t l = 0; l < best[i][0].attention.cross.size(); ++l)
      expect_close(best[i][0].attention.cross[l], results[i][0].attention.cross[l], "best cross");
  }
}

TEST(DecodingAttention, OffByDefault) {
  const auto m = translator();
  decoding::SearchOptions o;
  for (const auto& h : decoding::greedy_search(*m, kSources, o)) EXPECT_TRUE(h.attention.empty());
  o.beam_size = 3;
  for (const auto& hs : decoding::beam_search(*m, kSources, o))
    for (const auto& h : hs) EXPECT_TRUE(h.attention.empty());
}

TEST(DecodingAttention, GenerationWeightsEqualAForwardPassOverTheTokensRead) {
  models::CausalLM m(testing::small_config(3), 5);
  shake(m, 5, 0.6f);
  // Prompts of different lengths share a batch (left-padded); some rows may stop at EOS early.
  const std::vector<Tokens> prompts = {{2, 7, 9, 11}, {2}, {2, 30, 31, 5, 6, 8, 12, 13, 1}, {2, 17, 17}};
  decoding::GenerateOptions o;
  o.max_new_tokens = 7;
  std::vector<decoding::AttentionWeights> attention;
  const auto out = decoding::generate(m, prompts, {}, o, {}, &attention);
  ASSERT_EQ(attention.size(), prompts.size());
  // Capturing changes nothing in the output.
  EXPECT_EQ(out, decoding::generate(m, prompts, {}, o));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = "prompt " + std::to_string(i);
    Tokens read = prompts[i];
    read.insert(read.end(), out[i].begin(), out[i].end());
    // The last new token is read back only when the row went on (it stopped at EOS, not its budget).
    if (static_cast<int64_t>(out[i].size()) == o.max_new_tokens) read.pop_back();
    const int64_t T = static_cast<int64_t>(read.size());
    ASSERT_EQ(attention[i].decoder_self.size(), 2u) << what;
    EXPECT_TRUE(attention[i].cross.empty() && attention[i].encoder_self.empty());
    NoGradGuard no_grad;
    std::vector<Tensor> want;
    m.forward(Tensor::from_ids(Dims{1, T}, read), &want);
    for (size_t l = 0; l < 2; ++l) {
      EXPECT_EQ(attention[i].decoder_self[l].shape(), (Dims{4, T, T})) << what;
      expect_softmax_rows(attention[i].decoder_self[l], true, what);
      expect_close(attention[i].decoder_self[l], row_of(want[l], 0), what + " layer " + std::to_string(l));
    }
  }
}

}  // namespace
}  // namespace qkv
