// The search every family shares (decoding/beam.h) and its token rules (decoding/constraints.h):
// a causal LM's beam search, greedy search with the rules, against transformers' generate on a
// random GPT-2 (tests/python/make_gpt_search_refs.py); seq2seq sampling (determinism by seed, top_k 1
// = greedy) and the rules' effect on a random seq2seq model; bad options refused naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "error_message.h"
#include "model/ref_dir.h"
#include "qkv/decoding/generate.h"
#include "qkv/decoding/search.h"
#include "qkv/interop/hf_gpt2.h"
#include "qkv/kernels/random.h"
#include "decoding/small_causal_lm.h"

namespace qkv {
namespace {

using json = nlohmann::json;

// The call throws a qkv::Error whose message names `flag`.
#define EXPECT_THAT_ERROR(call, flag) \
  EXPECT_NE(test_support::error_message_of([&] { call; }, "(no error)").find(flag), std::string::npos) \
      << test_support::error_message_of([&] { call; }, "(no error)")

// The generate() keywords of a reference case as qkv options.
decoding::GenerateOptions generate_options_of(const json& o) {
  decoding::GenerateOptions g;
  g.max_new_tokens = o["max_new_tokens"].get<int64_t>();
  g.beam_size = o.value("num_beams", 1);
  g.num_hypotheses = o.value("num_return_sequences", 1);
  g.length_penalty = o.value("length_penalty", 1.0f);
  g.min_new_tokens = o.value("min_new_tokens", int64_t{0});
  g.constraints.repetition_penalty = o.value("repetition_penalty", 1.0f);
  g.constraints.no_repeat_ngram_size = o.value("no_repeat_ngram_size", int64_t{0});
  return g;
}

TEST(HfGptSearch, BeamSearchAndRulesEqualGenerate) {
  const std::string dir = testing::ref_path("hf_gpt2_search");
  if (dir.empty()) return;
  std::ifstream in(testing::ref_path("hf_gpt2_search_refs.json"));
  const json refs = json::parse(in);
  const auto model = interop::load_hf_gpt2(dir);
  model->eval();
  const auto prompts = refs["prompts"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_GT(refs["eos_endings"].get<int>(), 0);
  for (const json& c : refs["cases"]) {
    const std::string name = c["name"];
    const decoding::GenerateOptions o = generate_options_of(c["options"]);
    const auto want = c["outputs"].get<std::vector<std::vector<std::vector<int32_t>>>>();
    const auto ended = c["ended_with_eos"].get<std::vector<std::vector<bool>>>();
    if (o.beam_size == 1) {
      const auto got = decoding::generate(*model, prompts, {}, o);  // one batch: left padding must not matter
      for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i][0]) << name << ", prompt " << i;
      continue;
    }
    const auto scores = c["scores"].get<std::vector<std::vector<double>>>();
    const auto got = decoding::generate_hypotheses(*model, prompts, o);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size()) << name << ", prompt " << i;
      for (size_t h = 0; h < want[i].size(); ++h) {
        EXPECT_EQ(got[i][h].tokens, want[i][h]) << name << ", prompt " << i << ", hypothesis " << h;
        EXPECT_EQ(got[i][h].finished, ended[i][h]) << name << ", prompt " << i << ", hypothesis " << h;
        EXPECT_NEAR(got[i][h].score, scores[i][h], 1e-4) << name << ", prompt " << i << ", hypothesis " << h;
      }
    }
    // The best hypothesis is what generate() returns.
    const auto best = decoding::generate(*model, prompts, {}, o);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(best[i], want[i][0]) << name << ", prompt " << i;
  }
}

// The rules on one row of scores, by hand.
TEST(StepRules, EachRuleAsTransformersDefinesIt) {
  using decoding::apply_step_rules;
  const std::vector<int32_t> context{1}, generated{4, 2, 4};
  decoding::StepRules r;
  r.eos_id = 0;
  r.constraints.repetition_penalty = 2.f;
  std::vector<float> s{-1.f, 3.f, 2.f, 5.f, -4.f, 6.f};
  apply_step_rules(s.data(), 6, {context, generated}, r);
  EXPECT_EQ(s, (std::vector<float>{-1.f, 1.5f, 1.f, 5.f, -8.f, 6.f}));  // 1, 2, 4 once each

  r = {};
  r.eos_id = 0;
  r.constraints.no_repeat_ngram_size = 2;  // the row is 1 4 2 4: "4 2" exists, so 2 may not follow 4
  s.assign(6, 0.f);
  apply_step_rules(s.data(), 6, {context, generated}, r);
  EXPECT_EQ(s[2], -INFINITY);
  EXPECT_EQ(std::count(s.begin(), s.end(), -INFINITY), 1);

  r = {};
  r.eos_id = 0;
  r.min_new_tokens = 4;  // 3 tokens so far: EOS refused, unless the row must end here
  s.assign(6, 0.f);
  apply_step_rules(s.data(), 6, {context, generated}, r);
  EXPECT_EQ(s[0], -INFINITY);
  s.assign(6, 0.f);
  apply_step_rules(s.data(), 6, {context, generated}, r, /*at_limit=*/true);
  EXPECT_EQ(s[0], 0.f);
  r.min_new_tokens = 3;
  apply_step_rules(s.data(), 6, {context, generated}, r);
  EXPECT_EQ(s[0], 0.f);

  r = {};
  r.forced_first = 3;
  s.assign(6, 1.f);
  apply_step_rules(s.data(), 6, {context, {}}, r);
  EXPECT_EQ(s, (std::vector<float>{-INFINITY, -INFINITY, -INFINITY, 0.f, -INFINITY, -INFINITY}));
}

// A random seq2seq model (untrained: varied outputs) and a few sources.
std::unique_ptr<models::Transformer> random_seq2seq() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 32;
  c.dropout = 0.f;
  auto m = std::make_unique<models::Transformer>(c, 7);
  uint64_t counter = 0;
  for (auto& [name, p] : m->named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    Tensor t = p.value();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.8f * (kernels::uniform01(11, counter++) - 0.5f);
  }
  m->eval();
  return m;
}

std::vector<data::IdLine> some_sources() {
  return {{5, 6, 7, 8, 2}, {9, 10, 2}, {11, 12, 13, 14, 15, 16, 2}, {17, 2}, {5, 9, 13, 17, 21, 6, 2}};
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<std::vector<decoding::Hypothesis>>& found) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& f : found) out.push_back(f.empty() ? std::vector<int32_t>{} : f[0].tokens);
  return out;
}

TEST(Seq2SeqSampling, DeterministicBySeedIndependentOfBatchAndTopK1IsGreedy) {
  const auto model = random_seq2seq();
  const auto sources = some_sources();
  decoding::SearchOptions greedy;
  greedy.beam_size = 1;
  decoding::SearchOptions sample = greedy;
  sample.do_sample = true;
  sample.seed = 3;
  const auto drawn = tokens_of(decoding::search_in_batches(*model, sources, sample, 8));
  EXPECT_EQ(tokens_of(decoding::search_in_batches(*model, sources, sample, 8)), drawn);
  EXPECT_EQ(tokens_of(decoding::search_in_batches(*model, sources, sample, 2)), drawn) << "batch size changed a draw";
  sample.seed = 4;
  EXPECT_NE(tokens_of(decoding::search_in_batches(*model, sources, sample, 8)), drawn) << "the seed has no effect";
  EXPECT_NE(tokens_of(decoding::search_in_batches(*model, sources, greedy, 8)), drawn) << "sampling drew the argmax";
  sample.sampling.top_k = 1;
  EXPECT_EQ(tokens_of(decoding::search_in_batches(*model, sources, sample, 8)),
            tokens_of(decoding::search_in_batches(*model, sources, greedy, 8)));
}

// Whether any n-gram occurs twice in the row (decoder start, then tokens).
bool repeats_ngram(const std::vector<int32_t>& tokens, size_t n, int32_t start) {
  std::vector<int32_t> row{start};
  row.insert(row.end(), tokens.begin(), tokens.end());
  std::set<std::vector<int32_t>> seen;
  for (size_t i = 0; i + n <= row.size(); ++i)
    if (!seen.insert(std::vector<int32_t>(row.begin() + i, row.begin() + i + n)).second) return true;
  return false;
}

TEST(Seq2SeqRules, EachRuleChangesWhatEverySearchGives) {
  const auto model = random_seq2seq();
  const auto sources = some_sources();
  const int32_t bos = model->config().bos_id;
  for (const bool sample : {false, true}) {
    for (const int beam : {1, 4}) {
      if (sample && beam > 1) continue;
      decoding::SearchOptions o;
      o.beam_size = beam;
      o.do_sample = sample;
      o.max_length_ratio = 0;
      o.max_length_offset = 16;
      const std::string what = sample ? "sampling" : "beam " + std::to_string(beam);
      const auto plain = tokens_of(decoding::search_in_batches(*model, sources, o, 8));
      bool repeats = false;
      for (const auto& t : plain) repeats = repeats || repeats_ngram(t, 2, bos);
      ASSERT_TRUE(repeats) << what << ": the outputs repeat no bigram: the rule would go untested";

      decoding::SearchOptions rule = o;
      rule.constraints.no_repeat_ngram_size = 2;
      for (const auto& t : tokens_of(decoding::search_in_batches(*model, sources, rule, 8)))
        EXPECT_FALSE(repeats_ngram(t, 2, bos)) << what;

      rule = o;
      rule.min_length = 9;  // the decoder start counts: 8 tokens at least
      for (const auto& t : tokens_of(decoding::search_in_batches(*model, sources, rule, 8))) EXPECT_GE(t.size(), 8u) << what;

      rule = o;
      rule.constraints.repetition_penalty = 5.f;
      size_t repeated_plain = 0, repeated_penalised = 0;
      const auto count_repeats = [](const std::vector<int32_t>& t) {
        return t.size() - std::set<int32_t>(t.begin(), t.end()).size();
      };
      for (const auto& t : plain) repeated_plain += count_repeats(t);
      for (const auto& t : tokens_of(decoding::search_in_batches(*model, sources, rule, 8)))
        repeated_penalised += count_repeats(t);
      EXPECT_LT(repeated_penalised, repeated_plain) << what;
    }
  }
}

TEST(SearchRules, BadOptionsAreRefusedNamingTheFlag) {
  const auto model = random_seq2seq();
  decoding::SearchOptions o;
  o.do_sample = true;  // with the default beam 4
  EXPECT_THAT_ERROR(decoding::validate_search_options(o, 24), "--do-sample");
  o.beam_size = 1;
  o.sampling.top_p = 0;
  EXPECT_THAT_ERROR(decoding::validate_search_options(o, 24), "--top-p");
  o = {};
  o.constraints.repetition_penalty = 0;
  EXPECT_THAT_ERROR(decoding::validate_search_options(o, 24), "--repetition-penalty");
  o = {};
  o.constraints.no_repeat_ngram_size = -1;
  EXPECT_THAT_ERROR(decoding::validate_search_options(o, 24), "--no-repeat-ngram-size");
  o = {};
  o.min_length = -2;
  EXPECT_THAT_ERROR(decoding::validate_search_options(o, 24), "--min-length");

  decoding::GenerateOptions g;
  g.beam_size = 4;
  g.sample = true;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--do-sample");
  g.sample = false;
  g.stop_at_eos = false;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--ignore-eos");
  g = {};
  g.beam_size = 41;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--beam-size");
  g = {};
  g.beam_size = 2;
  g.num_hypotheses = 3;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--num-hypotheses");
  g = {};
  g.min_new_tokens = -1;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--min-new-tokens");
  g = {};
  g.length_penalty = -1;
  EXPECT_THAT_ERROR(decoding::validate_generate_options(g, 40), "--length-penalty");
}

// A causal LM's beam search of width 1 is greedy search; its n-best are distinct and ranked.
TEST(CausalBeamSearch, WidthOneIsGreedyAndHypothesesAreRanked) {
  const auto model = testing::small_model();
  const std::vector<std::vector<int32_t>> prompts{{1, 5, 6}, {1}, {1, 7, 8, 9, 10}};
  decoding::GenerateOptions o;
  o.max_new_tokens = 8;
  const auto greedy = decoding::generate(*model, prompts, {}, o);
  const auto width1 = decoding::generate_hypotheses(*model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(width1[i].at(0).tokens, greedy[i]) << "prompt " << i;
  o.beam_size = 5;
  o.num_hypotheses = 5;
  for (const auto& found : decoding::generate_hypotheses(*model, prompts, o)) {
    ASSERT_EQ(found.size(), 5u);
    std::set<std::vector<int32_t>> distinct;
    for (size_t h = 0; h < found.size(); ++h) {
      distinct.insert(found[h].tokens);
      if (h > 0) {
        EXPECT_GE(found[h - 1].score, found[h].score);
      }
      EXPECT_LE(found[h].tokens.size(), 8u);
    }
    EXPECT_EQ(distinct.size(), 5u);
  }
}

}  // namespace
}  // namespace qkv
