// Decoding: greedy and beam search on a model trained on the copy task (lengths 5-10; the right answer is
// the source), and their invariants: a beam of 1 equals greedy; decoding with and without the
// key/value cache gives the same tokens and scores; the score of an n-best hypothesis equals what
// `qkv score` (train::score) computes for the pair.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "qkv/data/synthetic.h"
#include "qkv/decoding/search.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

class SearchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models::TransformerConfig c;
    c.src_vocab_size = c.tgt_vocab_size = 16;
    c.d_model = 64;
    c.num_heads = 4;
    c.num_layers = 2;
    c.d_ff = 128;
    c.max_seq_length = 28;
    c.dropout = 0.f;
    model_ = new models::Transformer(c, 0);
    model_->train();
    train::Adam opt(model_->named_parameters(), train::AdamOptions{2e-3, 0.9, 0.98, 1e-9, 0.0});
    // 600 steps at 2e-3, then 400 at 3e-4: the annealing makes the copy (and where to stop) exact
    // regardless of the build's float summation order.
    for (int step = 0; step < 1000; ++step) {
      if (step == 600) opt.set_lr(3e-4);
      const data::SyntheticBatch b = data::synthetic_batch("copy", 32, 10, 16, 0, step);
      train::train_step(*model_, opt, b.src, b.tgt);
    }
    model_->eval();
  }
  static void TearDownTestSuite() { delete model_; }

  static std::vector<data::IdLine> sources() {
    return {{4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 4}, {15, 14, 13, 12, 11}, {7, 7, 9, 9, 11, 11}};
  }
  static models::Transformer* model_;
};
models::Transformer* SearchTest::model_ = nullptr;

TEST_F(SearchTest, GreedyAndBeamCopyTheSource) {
  const auto src = sources();
  const auto greedy = decoding::greedy_search(*model_, src, {});
  decoding::SearchOptions beam;
  beam.beam_size = 4;
  const auto beamed = decoding::beam_search(*model_, src, beam);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(greedy[i].tokens, src[i]) << "sentence " << i;
    EXPECT_TRUE(greedy[i].finished);
    ASSERT_EQ(beamed[i].size(), 1u);
    EXPECT_EQ(beamed[i][0].tokens, src[i]) << "sentence " << i;
  }
}

TEST_F(SearchTest, BeamOfOneEqualsGreedy) {
  // Also on an untrained model, whose outputs are long and arbitrary: a stronger check.
  models::TransformerConfig c = model_->config();
  models::Transformer untrained(c, 42);
  untrained.eval();
  for (const models::Transformer* m : {static_cast<const models::Transformer*>(model_), static_cast<const models::Transformer*>(&untrained)}) {
    decoding::SearchOptions o;
    o.beam_size = 1;
    const auto greedy = decoding::greedy_search(*m, sources(), o);
    const auto beam = decoding::beam_search(*m, sources(), o);
    for (size_t i = 0; i < greedy.size(); ++i) {
      EXPECT_EQ(beam[i][0].tokens, greedy[i].tokens) << "sentence " << i;
      EXPECT_NEAR(beam[i][0].log_prob, greedy[i].log_prob, 1e-4) << "sentence " << i;
    }
  }
}

TEST_F(SearchTest, CacheDoesNotChangeTheResult) {
  models::Transformer untrained(model_->config(), 7);
  untrained.eval();
  for (const models::Transformer* m : {static_cast<const models::Transformer*>(model_), static_cast<const models::Transformer*>(&untrained)}) {
    for (int beam : {1, 3}) {
      decoding::SearchOptions with, without;
      with.beam_size = without.beam_size = beam;
      with.n_best = without.n_best = beam;
      without.use_cache = false;
      const auto a = decoding::beam_search(*m, sources(), with);
      const auto b = decoding::beam_search(*m, sources(), without);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].size(), b[i].size());
        for (size_t j = 0; j < a[i].size(); ++j) {
          EXPECT_EQ(a[i][j].tokens, b[i][j].tokens) << "beam " << beam << " sentence " << i << " hyp " << j;
          EXPECT_NEAR(a[i][j].log_prob, b[i][j].log_prob, 1e-4);
        }
      }
    }
  }
}

TEST_F(SearchTest, NBestScoresEqualTeacherForcedScores) {
  models::Transformer untrained(model_->config(), 3);
  untrained.eval();
  for (const models::Transformer* m : {static_cast<const models::Transformer*>(model_), static_cast<const models::Transformer*>(&untrained)}) {
    decoding::SearchOptions o;
    o.beam_size = 4;
    o.n_best = 4;
    const auto src = sources();
    const auto results = decoding::beam_search(*m, src, o);
    std::vector<data::IdLine> s, t;
    std::vector<double> want;
    for (size_t i = 0; i < src.size(); ++i)
      for (const auto& h : results[i]) {
        ASSERT_TRUE(h.finished);
        data::IdLine tgt{m->config().bos_id};
        tgt.insert(tgt.end(), h.tokens.begin(), h.tokens.end());
        tgt.push_back(m->config().eos_id);
        s.push_back(src[i]);
        t.push_back(tgt);
        want.push_back(h.log_prob);
      }
    const train::ScoreResult scored = train::score(*m, s, t, 5);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(scored.line_log_prob[i], want[i], 1e-3 + 1e-5 * std::fabs(want[i]));
    // Best first, by length-normalised score.
    for (const auto& r : results)
      for (size_t j = 1; j < r.size(); ++j) EXPECT_GE(r[j - 1].score, r[j].score);
  }
}

TEST_F(SearchTest, BadOptionsAndSourcesAreRefused) {
  decoding::SearchOptions o;
  o.n_best = 5;
  o.beam_size = 2;
  EXPECT_THROW(decoding::beam_search(*model_, sources(), o), Error);
  EXPECT_THROW(decoding::greedy_search(*model_, {data::IdLine{}}, {}), Error);
  EXPECT_THROW(decoding::greedy_search(*model_, {data::IdLine(30, 5)}, {}), Error);  // longer than max_seq_length
}

// Each option out of its range is refused naming it, before any decoding (a beam of 100000 used
// to run for minutes on one sentence).
TEST_F(SearchTest, OptionsOutOfRangeAreRefusedNamingTheOption) {
  const auto error_of = [&](const decoding::SearchOptions& o) -> std::string {
    try {
      decoding::beam_search(*model_, sources(), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "<accepted>";
  };
  const auto with = [](auto change) {
    decoding::SearchOptions o;
    change(o);
    return o;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const struct {
    decoding::SearchOptions options;
    std::string message;
  } cases[] = {
      {with([](auto& o) { o.beam_size = 100000; }), "search: beam_size 100000 must be in [1, 16] (at most 1024 and the target vocabulary size 16)"},
      {with([](auto& o) { o.beam_size = 17; }), "search: beam_size 17 must be in [1, 16]"},
      {with([](auto& o) { o.beam_size = 0; }), "search: beam_size 0 must be in [1, 16]"},
      {with([](auto& o) { o.n_best = 5; }), "search: n_best 5 must be in [1, beam_size 4]"},
      {with([](auto& o) { o.n_best = 0; }), "search: n_best 0 must be in [1, beam_size 4]"},
      {with([nan](auto& o) { o.length_penalty = nan; }), "search: length_penalty nan must be in [0, 10]"},
      {with([inf](auto& o) { o.length_penalty = inf; }), "search: length_penalty inf must be in [0, 10]"},
      {with([](auto& o) { o.length_penalty = -1; }), "search: length_penalty -1 must be in [0, 10]"},
      {with([nan](auto& o) { o.max_length_ratio = nan; }), "search: max_length_ratio nan must be in [0, 1000]"},
      {with([](auto& o) { o.max_length_ratio = -1; }), "search: max_length_ratio -1 must be in [0, 1000]"},
      {with([](auto& o) { o.max_length_ratio = 1e30f; }), "search: max_length_ratio 1e+30 must be in [0, 1000]"},
      {with([](auto& o) { o.max_length_offset = -1000; }), "search: max_length_offset -1000 must be in [0, 1048576]"},
      {with([](auto& o) { o.max_length_offset = int64_t{1} << 62; }), "search: max_length_offset 4611686018427387904"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.options);
    EXPECT_EQ(e.rfind(c.message, 0), 0u) << e;
  }
  // Greedy search checks the options it uses.
  EXPECT_THROW(decoding::greedy_search(*model_, sources(), with([nan](auto& o) { o.max_length_ratio = nan; })), Error);
  // The largest beam the vocabulary allows works.
  EXPECT_EQ(error_of(with([](auto& o) { o.beam_size = o.n_best = 16; })), "<accepted>");
}

}  // namespace
}  // namespace qkv
