// Sampling (decoding/sampling.h): which tokens temperature / top-k / top-p keep, against what
// Hugging Face's warpers keep on the same logits (the expected sets were produced by the warpers'
// code run with torch, float32 and float64 alike; where HF's choice among equal probabilities is
// torch.sort's unspecified order, qkv's rule, lower id first, is stated instead); that 200,000
// draws follow the distribution (chi-square at p = 0.001); and that the random stream is a pure
// function of (seed, line, step), so generation with a model draws the same tokens for 1 and 2
// threads and for batches of 1 and 3.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/threads.h"
#include "qkv/decoding/generate.h"
#include "qkv/decoding/sampling.h"

namespace qkv {
namespace {

using decoding::SamplingOptions;

const std::vector<double> kProbs = {0.05, 0.4, 0.1, 0.25, 0.15, 0.05};

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> z;
  for (double v : p) z.push_back(static_cast<float>(std::log(v)));
  return z;
}

SamplingOptions opts(double temperature, int64_t top_k, double top_p) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

// Ids with non-zero probability.
std::vector<int> kept(const std::vector<float>& logits, const SamplingOptions& o) {
  const std::vector<double> p = decoding::sampling_distribution(logits.data(), static_cast<int64_t>(logits.size()), o);
  std::vector<int> ids;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) ids.push_back(static_cast<int>(i));
  return ids;
}

using Ids = std::vector<int>;

TEST(Sampling, TopKKeepsTheKLargest) {
  const auto z = log_probs(kProbs);
  EXPECT_EQ(kept(z, opts(1, 1, 1)), (Ids{1}));
  EXPECT_EQ(kept(z, opts(1, 2, 1)), (Ids{1, 3}));
  EXPECT_EQ(kept(z, opts(1, 3, 1)), (Ids{1, 3, 4}));
  EXPECT_EQ(kept(z, opts(1, 6, 1)), (Ids{0, 1, 2, 3, 4, 5}));   // k = V
  EXPECT_EQ(kept(z, opts(1, 10, 1)), (Ids{0, 1, 2, 3, 4, 5}));  // k > V
  EXPECT_EQ(kept(z, opts(1, 0, 1)), (Ids{0, 1, 2, 3, 4, 5}));   // off
}

TEST(Sampling, TopKKeepsEveryTokenTiedWithTheKth) {
  const std::vector<float> z = {1, 3, 2, 2, 0, 2};
  EXPECT_EQ(kept(z, opts(1, 1, 1)), (Ids{1}));
  EXPECT_EQ(kept(z, opts(1, 2, 1)), (Ids{1, 2, 3, 5}));  // the 2nd largest is 2: all three 2s stay
  EXPECT_EQ(kept(z, opts(1, 4, 1)), (Ids{1, 2, 3, 5}));
  EXPECT_EQ(kept(z, opts(1, 5, 1)), (Ids{0, 1, 2, 3, 5}));
}

TEST(Sampling, TopPKeepsTheTokenThatCrossesP) {
  // Descending: 0.4 (1), 0.25 (3), 0.15 (4), 0.1 (2), 0.05 (0), 0.05 (5).
  const auto z = log_probs(kProbs);
  EXPECT_EQ(kept(z, opts(1, 0, 0.39)), (Ids{1}));
  EXPECT_EQ(kept(z, opts(1, 0, 0.41)), (Ids{1, 3}));
  EXPECT_EQ(kept(z, opts(1, 0, 0.5)), (Ids{1, 3}));
  EXPECT_EQ(kept(z, opts(1, 0, 0.75)), (Ids{1, 3, 4}));
  // 0.9 before the two tied 0.05s: one of them crosses 0.92; the lower id ranks first.
  EXPECT_EQ(kept(z, opts(1, 0, 0.92)), (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(kept(z, opts(1, 0, 1.0)), (Ids{0, 1, 2, 3, 4, 5}));
  // Always at least the most probable token.
  EXPECT_EQ(kept(z, opts(1, 0, 1e-9)), (Ids{1}));
}

TEST(Sampling, TopPHitExactlyStopsThere) {
  // Eight equal logits: probabilities exactly 1/8, cumulative sums exact.
  const std::vector<float> z(8, 0.f);
  EXPECT_EQ(kept(z, opts(1, 0, 0.375)), (Ids{0, 1, 2}));    // three reach 0.375 exactly: the 4th is dropped
  EXPECT_EQ(kept(z, opts(1, 0, 0.38)), (Ids{0, 1, 2, 3}));  // the 4th crosses 0.38
  EXPECT_EQ(kept(z, opts(1, 0, 0.125)), (Ids{0}));
  EXPECT_EQ(kept(z, opts(1, 0, 0.1)), (Ids{0}));
}

TEST(Sampling, OrderIsTemperatureThenTopKThenTopP) {
  const auto z = log_probs(kProbs);
  // Top-p over the top-k survivors renormalised: 0.5, 0.3125, 0.1875.
  EXPECT_EQ(kept(z, opts(1, 3, 0.6)), (Ids{1, 3}));
  // Temperature sharpens before top-p: at T = 0.5, 1 and 3 hold 0.615 + 0.240 > 0.7.
  EXPECT_EQ(kept(z, opts(0.5, 0, 0.7)), (Ids{1, 3}));
  EXPECT_EQ(kept(z, opts(1, 0, 0.7)), (Ids{1, 3, 4}));
  // T = 2 flattens to sqrt(p); top-2 renormalised: 0.558, 0.442.
  EXPECT_EQ(kept(z, opts(2, 2, 0.55)), (Ids{1}));
}

TEST(Sampling, DistributionValues) {
  const auto z = log_probs(kProbs);
  auto p = decoding::sampling_distribution(z.data(), 6, opts(1, 0, 1));
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(p[i], kProbs[i], 1e-7);
  p = decoding::sampling_distribution(z.data(), 6, opts(1, 3, 1));
  EXPECT_NEAR(p[1], 0.5, 1e-7);
  EXPECT_NEAR(p[3], 0.3125, 1e-7);
  EXPECT_NEAR(p[4], 0.1875, 1e-7);
  EXPECT_EQ(p[0] + p[2] + p[5], 0.0);
  // Temperature: softmax(z / T).
  p = decoding::sampling_distribution(z.data(), 6, opts(0.7, 0, 1));
  double total = 0;
  for (double v : kProbs) total += std::pow(v, 1 / 0.7);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(p[i], std::pow(kProbs[i], 1 / 0.7) / total, 1e-7);
  // -inf logits are probability 0; NaN and +inf, or nothing finite, are errors.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, 0.f, -inf, 0.f};
  p = decoding::sampling_distribution(masked.data(), 4, opts(1, 0, 1));
  EXPECT_EQ(p, (std::vector<double>{0, 0.5, 0, 0.5}));
  const std::vector<float> none = {-inf, -inf}, nan = {0.f, std::nanf("")}, pinf = {0.f, inf};
  EXPECT_THROW(decoding::sampling_distribution(none.data(), 2, opts(1, 0, 1)), Error);
  EXPECT_THROW(decoding::sampling_distribution(nan.data(), 2, opts(1, 0, 1)), Error);
  EXPECT_THROW(decoding::sampling_distribution(pinf.data(), 2, opts(1, 0, 1)), Error);
}

TEST(Sampling, ValidateNamesTheFlag) {
  auto message = [](const SamplingOptions& o) {
    try {
      decoding::validate_sampling_options(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(opts(1, 0, 1)), "");
  EXPECT_EQ(message(opts(0.01, 5, 0.5)), "");
  EXPECT_NE(message(opts(0, 0, 1)).find("--temperature"), std::string::npos);
  EXPECT_NE(message(opts(-1, 0, 1)).find("--temperature"), std::string::npos);
  EXPECT_NE(message(opts(std::nan(""), 0, 1)).find("--temperature"), std::string::npos);
  EXPECT_NE(message(opts(1, -1, 1)).find("--top-k"), std::string::npos);
  EXPECT_NE(message(opts(1, 0, 0)).find("--top-p"), std::string::npos);
  EXPECT_NE(message(opts(1, 0, 1.01)).find("--top-p"), std::string::npos);
  EXPECT_NE(message(opts(1, 0, -0.5)).find("--top-p"), std::string::npos);
}

TEST(Sampling, ArgmaxTakesTheLowestIdAmongTies) {
  const std::vector<float> z = {1, 3, 2, 3, 3};
  EXPECT_EQ(decoding::argmax_token(z.data(), 5), 1);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> low = {-inf, -inf, -5};
  EXPECT_EQ(decoding::argmax_token(low.data(), 3), 2);
}

TEST(Sampling, DrawTokenIsTheInverseCdfInIdOrder) {
  const std::vector<double> p = {0, 0.25, 0, 0.5, 0.25};
  EXPECT_EQ(decoding::draw_token(p, 0.0), 1);  // never an id of probability 0
  EXPECT_EQ(decoding::draw_token(p, 0.2499), 1);
  EXPECT_EQ(decoding::draw_token(p, 0.25), 3);
  EXPECT_EQ(decoding::draw_token(p, 0.7499), 3);
  EXPECT_EQ(decoding::draw_token(p, 0.75), 4);
  EXPECT_EQ(decoding::draw_token(p, std::nextafter(1.0, 0.0)), 4);
}

TEST(Sampling, UniformIsAPureFunctionOfSeedLineStep) {
  EXPECT_EQ(decoding::sampling_uniform(7, 3, 11), decoding::sampling_uniform(7, 3, 11));
  std::set<double> seen;
  for (uint64_t seed : {0, 1}) {
    for (uint64_t line = 0; line < 30; ++line)
      for (uint64_t step = 0; step < 30; ++step) {
        const double u = decoding::sampling_uniform(seed, line, step);
        EXPECT_GE(u, 0.0);
        EXPECT_LT(u, 1.0);
        seen.insert(u);
      }
  }
  EXPECT_EQ(seen.size(), 2u * 30 * 30);  // no two (seed, line, step) of these share a draw
}

// Pearson's chi-square of `counts` against `expected` probabilities over the ids with
// expected > 0; ids with expected 0 must never be drawn. Returns the statistic.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t n, int* df) {
  double chi2 = 0;
  *df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " was filtered but drawn";
      continue;
    }
    const double e = expected[i] * static_cast<double>(n);
    chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++*df;
  }
  return chi2;
}

// The 0.999 quantile of chi-square with df degrees of freedom (df = 1..9).
double chi_square_critical_001(int df) {
  static const double q[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877};
  return q[df];
}

struct ChiCase {
  const char* name;
  SamplingOptions options;
  std::vector<double> expected;  // computed here from the definition, not by sampling_distribution
};

TEST(Sampling, DrawsFollowTheDistribution) {
  // Vocabulary of 8 with a known distribution.
  const std::vector<double> base = {0.02, 0.3, 0.05, 0.2, 0.13, 0.1, 0.08, 0.12};
  const auto z = log_probs(base);
  auto normalised = [](std::vector<double> w) {
    const double s = std::accumulate(w.begin(), w.end(), 0.0);
    for (double& v : w) v /= s;
    return w;
  };
  std::vector<double> t07(8);
  for (size_t i = 0; i < 8; ++i) t07[i] = std::pow(base[i], 1 / 0.7);
  t07 = normalised(t07);
  // top-k 4: ids 1 (0.3), 3 (0.2), 4 (0.13), 7 (0.12).
  const std::vector<double> k4 = normalised({0, 0.3, 0, 0.2, 0.13, 0, 0, 0.12});
  // top-p 0.7: 0.3 + 0.2 + 0.13 = 0.63 < 0.7, + 0.12 crosses: the same four tokens; at T = 0.7
  // the sharper distribution reaches 0.7 with three: 1, 3, 4.
  std::vector<double> t07_p07 = {0, t07[1], 0, t07[3], t07[4], 0, 0, 0};
  ASSERT_LT(t07[1] + t07[3], 0.7);
  ASSERT_GT(t07[1] + t07[3] + t07[4], 0.7);
  t07_p07 = normalised(t07_p07);
  // T = 0.7, top-k 5 (adds id 5), then top-p 0.9 over those five renormalised: 1, 3, 4 hold less
  // than 0.9, id 7 crosses it, id 5 goes.
  std::vector<double> t07_k5(8, 0);
  for (int i : {1, 3, 4, 7, 5}) t07_k5[i] = t07[i];
  t07_k5 = normalised(t07_k5);
  ASSERT_LT(t07_k5[1] + t07_k5[3] + t07_k5[4], 0.9);
  ASSERT_GT(t07_k5[1] + t07_k5[3] + t07_k5[4] + t07_k5[7], 0.9);
  std::vector<double> t07_k5_p09 = t07_k5;
  t07_k5_p09[5] = 0;
  t07_k5_p09 = normalised(t07_k5_p09);
  const std::vector<ChiCase> cases = {
      {"T=1", opts(1, 0, 1), base},
      {"T=0.7", opts(0.7, 0, 1), t07},
      {"T=1 top-k 4", opts(1, 4, 1), k4},
      {"T=1 top-p 0.7", opts(1, 0, 0.7), k4},
      {"T=0.7 top-p 0.7", opts(0.7, 0, 0.7), t07_p07},
      {"T=0.7 top-k 5 top-p 0.9", opts(0.7, 5, 0.9), t07_k5_p09},
  };
  const int64_t n = 200000;
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<int64_t> counts(8, 0);
    const std::vector<double> dist = decoding::sampling_distribution(z.data(), 8, cases[c].options);
    for (size_t i = 0; i < 8; ++i) ASSERT_NEAR(dist[i], cases[c].expected[i], 1e-6) << cases[c].name << " token " << i;
    // Draws vary both the line and the step key.
    for (int64_t d = 0; d < n; ++d)
      ++counts[static_cast<size_t>(decoding::sample_token(z.data(), 8, cases[c].options, 1234 + c,
                                                          static_cast<uint64_t>(d % 500), static_cast<uint64_t>(d / 500)))];
    int df = 0;
    const double chi2 = chi_square(counts, cases[c].expected, n, &df);
    ASSERT_GE(df, 1);
    std::printf("[chi-square] %-26s df %d  chi2 %.3f  (p = 0.001 critical value %.3f)\n", cases[c].name, df, chi2,
                chi_square_critical_001(df));
    EXPECT_LT(chi2, chi_square_critical_001(df)) << cases[c].name;
  }
}

// Sampled generation with a small random decoder-only model: the tokens of a line depend on the
// seed and its line key only, not on the thread count or the batch.
TEST(Sampling, SameSeedSameTokensAcrossThreadsAndBatches) {
  models::TransformerConfig c = models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 50;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 40;
  c.dropout = 0.f;
  models::CausalLM model(c, 11);
  model.eval();
  const std::vector<std::vector<int32_t>> prompts = {{2, 5, 6, 7, 8, 9}, {2}, {2, 40, 41}};
  decoding::GenerateOptions o;
  o.max_new_tokens = 20;
  o.sample = true;
  o.seed = 2024;
  o.sampling = opts(0.9, 30, 0.95);
  const int threads_before = num_threads();
  set_num_threads(1);
  const auto one_thread = decoding::generate(model, prompts, {}, o);
  set_num_threads(2);
  const auto two_threads = decoding::generate(model, prompts, {}, o);
  std::vector<std::vector<int32_t>> one_by_one;
  for (size_t i = 0; i < prompts.size(); ++i) one_by_one.push_back(decoding::generate(model, {prompts[i]}, {i}, o)[0]);
  set_num_threads(threads_before);
  EXPECT_EQ(one_thread, two_threads);
  EXPECT_EQ(one_thread, one_by_one);
  for (const auto& t : one_thread) EXPECT_EQ(t.size(), 20u);
  o.seed = 2025;
  EXPECT_NE(decoding::generate(model, prompts, {}, o), one_thread);
}

}  // namespace
}  // namespace qkv
