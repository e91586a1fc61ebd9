// A search step from each row's candidates (decoding/search_steps.h: top_step, the path logits on
// a GPU take) against the host's step over whole rows (score_step on the CPU; argmax_token after
// apply_step_rules for greedy search without log-probabilities). Run here on the CPU, so that the
// GPU's path is checked on every machine; OpsOnGpu.TopOfRowsIsTheCpus checks the GPU's top itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "error_message.h"
#include "qkv/decoding/sampling.h"
#include "qkv/decoding/search_steps.h"
#include "qkv/ops/ops.h"

namespace qkv {
namespace {

using decoding::RowView;
using decoding::StepRules;
using decoding::StepScores;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Logits (N, V) with the cases a top must order as the host does: coarse values (many ties, also
// across the rules' ids), runs of -inf, and a row with one finite entry.
Tensor awkward_logits(int64_t N, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> coarse(-6, 6), pick(0, 9);
  std::vector<float> x(static_cast<size_t>(N * V));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = 0; v < V; ++v) {
      const int kind = pick(rng);
      float& z = x[static_cast<size_t>(i * V + v)];
      z = kind == 0  ? kNegInf
          : kind < 4 ? 0.5f * static_cast<float>(coarse(rng))
                     : std::normal_distribution<float>(0.f, 2.f)(rng);
      if (i == N - 1) z = v == V / 2 ? 1.f : kNegInf;
    }
  return Tensor::from_vector(Dims{N, V}, x);
}

// The rules of a seq2seq search (forbidden ids, EOS, a minimum length, a forced first token) or of
// a causal LM (EOS only), in turn.
std::vector<StepRules> rule_sets(int64_t V) {
  StepRules seq2seq;
  seq2seq.never = {0, static_cast<int32_t>(V - 1)};
  seq2seq.eos_id = 3;
  seq2seq.min_new_tokens = 2;
  StepRules forced = seq2seq;
  forced.forced_first = 7;
  StepRules forced_eos = seq2seq;
  forced_eos.forced_first = 3;
  StepRules causal;
  causal.eos_id = 5;
  causal.min_new_tokens = 1;
  StepRules bare;
  return {seq2seq, forced, forced_eos, causal, bare};
}

// Row i's view at `step`: rows at a limit every third one (the minimum length gives way there).
RowView view_at(int64_t i, int64_t step, std::vector<int32_t>& generated) {
  generated.assign(static_cast<size_t>(step), 9);
  return RowView{{{}, generated}, i % 3 == 2};
}

TEST(StepCandidates, TheTopOfLogProbsIsTheHostsStep) {
  const int64_t N = 7;
  for (const int64_t V : {int64_t{40}, int64_t{300}})
    for (const StepRules& rules : rule_sets(V))
      for (const int64_t count : {int64_t{1}, int64_t{4}, int64_t{8}})
        for (const int64_t step : {int64_t{0}, int64_t{1}, int64_t{5}}) {
          const std::string label = "V " + std::to_string(V) + ", count " + std::to_string(count) + ", step " +
                                    std::to_string(step) + ", eos " + std::to_string(rules.eos_id) + ", forced " +
                                    std::to_string(rules.forced_first);
          ASSERT_TRUE(decoding::top_suffices(rules, count)) << label;
          std::vector<std::vector<int32_t>> generated(N);
          const auto view_of = [&](int64_t i) { return view_at(i, step, generated[static_cast<size_t>(i)]); };
          const Tensor logits = awkward_logits(N, V, static_cast<uint32_t>(V + count + step));
          const StepScores host = decoding::score_step(logits.clone(), rules, count, view_of);
          const StepScores top = decoding::top_step(logits.clone(), rules, count, view_of, true);
          EXPECT_FALSE(top.log_probs.defined()) << label;
          ASSERT_EQ(top.top.size(), host.top.size()) << label;
          for (int64_t i = 0; i < N; ++i) {
            const auto r = static_cast<size_t>(i);
            EXPECT_EQ(top.top[r].token, host.top[r].token) << label << ", row " << i;
            EXPECT_EQ(top.top[r].log_prob, host.top[r].log_prob) << label << ", row " << i;  // the same bits
            const float a = top.eos_log_prob[r], b = host.eos_log_prob[r];
            EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b)))
                << label << ", row " << i << ": " << a << " vs " << b;
          }
        }
}

// Greedy search without log-probabilities: the best candidate of the raw logits after the rules is
// argmax_token's choice over the whole row with the rules applied (ties to the smaller id).
TEST(StepCandidates, TheTopOfLogitsIsArgmaxAfterTheRules) {
  const int64_t N = 6, V = 120;
  for (const StepRules& rules : rule_sets(V))
    for (const int64_t step : {int64_t{0}, int64_t{1}, int64_t{3}}) {
      std::vector<std::vector<int32_t>> generated(N);
      const auto view_of = [&](int64_t i) { return view_at(i, step, generated[static_cast<size_t>(i)]); };
      const Tensor logits = awkward_logits(N, V, static_cast<uint32_t>(step + 11));
      const StepScores top = decoding::top_step(logits.clone(), rules, 1, view_of, false);
      for (int64_t i = 0; i < N; ++i) {
        std::vector<float> row(logits.f32() + i * V, logits.f32() + (i + 1) * V);
        const RowView view = view_of(i);
        decoding::apply_step_rules(row.data(), V, view.history, rules, view.at_limit);
        const int32_t want = decoding::argmax_token(row.data(), V);
        const auto& got = top.top[static_cast<size_t>(i)];
        ASSERT_EQ(got.token.size(), 1u) << "step " << step << ", row " << i;
        EXPECT_EQ(got.token[0], want) << "step " << step << ", row " << i;
        EXPECT_EQ(got.log_prob[0], row[static_cast<size_t>(want)])
            << "the logit itself, step " << step << ", row " << i;
      }
    }
}

TEST(StepCandidates, NanLogitsAreAnErrorAsOnTheHost) {
  for (const bool normalise : {true, false}) {
    Tensor logits = awkward_logits(3, 50, 1);
    logits.f32()[50 + 17] = std::numeric_limits<float>::quiet_NaN();
    const std::string message = test_support::error_message_of([&] {
      decoding::top_step(logits, rule_sets(50)[0], 2, [](int64_t) { return RowView{}; }, normalise);
    }, "(no error)");
    EXPECT_NE(message.find("NaN"), std::string::npos) << message;
    EXPECT_NE(message.find("row 1"), std::string::npos) << message;
  }
}

// Rules that read a row's tokens, or more forbidden ids than a top carries, need whole rows.
TEST(StepCandidates, RulesThatNeedWholeRowsAreRefused) {
  StepRules penalty;
  penalty.constraints.repetition_penalty = 1.3f;
  StepRules ngrams;
  ngrams.constraints.no_repeat_ngram_size = 2;
  StepRules many;
  for (int32_t id = 0; id < ops::max_top_of_rows(); ++id) many.never.push_back(id);
  for (const StepRules& rules : {penalty, ngrams, many}) {
    EXPECT_FALSE(decoding::top_suffices(rules, 1));
    const std::string message = test_support::error_message_of([&] {
      decoding::top_step(awkward_logits(2, 40, 2), rules, 1, [](int64_t) { return RowView{}; }, true);
    }, "(no error)");
    EXPECT_NE(message.find("whole scores"), std::string::npos) << message;
  }
  EXPECT_TRUE(decoding::top_suffices(StepRules{}, ops::max_top_of_rows()));
  EXPECT_FALSE(decoding::top_suffices(StepRules{}, ops::max_top_of_rows() + 1));
}

}  // namespace
}  // namespace qkv
