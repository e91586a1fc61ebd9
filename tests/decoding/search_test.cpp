// Decoding: greedy and beam search on a model trained on the copy task (lengths 5-10; the right answer is
// the source), and their invariants: a beam of 1 equals greedy; decoding with and without the
// key/value cache gives the same tokens and scores; the score of an n-best hypothesis equals what
// `qkv score` (train::score) computes for the pair. The trained model is shared between the test
// processes through a checkpoint beside the binary (SearchTest::trained).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <limits>
#include <random>
#include <string>
#include <system_error>

#include "qkv/data/synthetic.h"
#include "qkv/decoding/search.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

// The same hypotheses, bit for bit: tokens and log-probabilities (`what` names the case).
void expect_identical(const std::vector<decoding::Hypothesis>& got, const std::vector<decoding::Hypothesis>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got[j].tokens, want[j].tokens) << what << ", hyp " << j;
    EXPECT_EQ(got[j].log_prob, want[j].log_prob) << what << ", hyp " << j;
  }
}

class SearchTest : public ::testing::Test {
 protected:
  static models::TransformerConfig config() {
    models::TransformerConfig c;
    c.src_vocab_size = c.tgt_vocab_size = 16;
    c.d_model = 64;
    c.num_heads = 4;
    c.num_layers = 2;
    c.d_ff = 128;
    c.max_seq_length = 28;
    c.dropout = 0.f;
    return c;
  }
  // Trained on first use only, and shared through a checkpoint beside the test binary: ctest runs
  // each test in its own process, and the 1000 steps are most of a test's time (about a minute under
  // the sanitizers). The checkpoint's name carries the binary's size and time, so a rebuilt binary
  // trains again; two processes that train at once both do, and the first to finish is kept.
  static const models::Transformer& trained() {
    static const std::unique_ptr<models::Transformer> model = [] {
      const std::filesystem::path cache = shared_checkpoint_path();
      bool unreadable = false;
      if (std::filesystem::exists(cache)) {
        try {
          auto m = models::load_seq2seq(cache.string());
          m->eval();
          return m;
        } catch (const std::exception&) {  // train, and replace it below
          unreadable = true;
        }
      }
      auto m = train_copy_model();
      const std::filesystem::path own = cache.string() + ".tmp-" + std::to_string(::getpid());
      try {
        models::save_model(own.string(), *m);
        if (unreadable) std::filesystem::remove_all(cache);
        std::filesystem::rename(own, cache);  // fails where another process has written it since
        remove_older_checkpoints(cache);
      } catch (const std::exception&) {
      }
      std::error_code ignored;
      std::filesystem::remove_all(own, ignored);
      return m;
    }();
    return *model;
  }

  static std::unique_ptr<models::Transformer> train_copy_model() {
    auto m = std::make_unique<models::Transformer>(config(), 0);
    m->train();
    train::Adam opt(m->named_parameters(), train::AdamOptions{2e-3, 0.9, 0.98, 1e-9, 0.0});
    // 600 steps at 2e-3, then 400 at 3e-4: the annealing makes the copy (and where to stop) exact
    // regardless of the build's float summation order.
    for (int step = 0; step < 1000; ++step) {
      if (step == 600) opt.set_lr(3e-4);
      const data::SyntheticBatch b = data::synthetic_batch("copy", 32, 10, 16, 0, step);
      train::train_step(*m, opt, b.src, b.tgt);
    }
    m->eval();
    return m;
  }

  static constexpr const char* kCheckpointPrefix = "search_test_copy_model-";

  static std::filesystem::path shared_checkpoint_path() {
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
    const auto stamp = static_cast<uint64_t>(std::filesystem::last_write_time(exe).time_since_epoch().count());
    return exe.parent_path() /
           (kCheckpointPrefix + std::to_string(std::filesystem::file_size(exe)) + "-" + std::to_string(stamp));
  }

  // Those of earlier builds of the binary, and the *.tmp-PID of processes killed while saving (not
  // a live process's work in progress).
  static void remove_older_checkpoints(const std::filesystem::path& current) {
    for (const auto& entry : std::filesystem::directory_iterator(current.parent_path())) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with(kCheckpointPrefix) || entry.path() == current) continue;
      const size_t tmp = name.find(".tmp-");
      if (tmp != std::string::npos && ::kill(static_cast<pid_t>(std::atol(name.c_str() + tmp + 5)), 0) == 0) continue;
      std::error_code ignored;  // another process may be removing it too
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }

  static std::vector<data::IdLine> sources() {
    return {{4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 4}, {15, 14, 13, 12, 11}, {7, 7, 9, 9, 11, 11}};
  }
};

TEST_F(SearchTest, GreedyAndBeamCopyTheSource) {
  const auto src = sources();
  const auto greedy = decoding::greedy_search(trained(), src, {});
  decoding::SearchOptions beam;
  beam.beam_size = 4;
  const auto beamed = decoding::beam_search(trained(), src, beam);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(greedy[i].tokens, src[i]) << "sentence " << i;
    EXPECT_TRUE(greedy[i].finished);
    ASSERT_EQ(beamed[i].size(), 1u);
    EXPECT_EQ(beamed[i][0].tokens, src[i]) << "sentence " << i;
  }
}

TEST_F(SearchTest, BeamOfOneEqualsGreedy) {
  // Also on an untrained model, whose outputs are long and arbitrary: a stronger check.
  models::TransformerConfig c = config();
  models::Transformer untrained(c, 42);
  untrained.eval();
  for (const models::Transformer* m : {&trained(), static_cast<const models::Transformer*>(&untrained)}) {
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
  models::Transformer untrained(config(), 7);
  untrained.eval();
  for (const models::Transformer* m : {&trained(), static_cast<const models::Transformer*>(&untrained)}) {
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

// api::Translator sets the compute type once, at load: a model prepared twice the same way searches
// to the same hypotheses and scores, bit for bit; a scoped compute type leaves none behind; and
// int8 really changes the products (its scores differ).
TEST_F(SearchTest, TheComputeTypeIsPreparedOnceAndServesEverySearch) {
  models::Transformer untrained(config(), 9);
  untrained.eval();
  decoding::SearchOptions o;
  o.beam_size = 3;
  o.n_best = 3;
  std::vector<std::vector<decoding::Hypothesis>> float32;
  for (const auto type : {nn::ComputeType::Float32, nn::ComputeType::Int8}) {
    untrained.set_compute_type(type);
    const auto a = decoding::beam_search(untrained, sources(), o);
    untrained.set_compute_type(type);  // prepared again from the same weights
    const auto b = decoding::beam_search(untrained, sources(), o);
    for (size_t i = 0; i < a.size(); ++i) expect_identical(b[i], a[i], "sentence " + std::to_string(i));
    if (type == nn::ComputeType::Float32) {
      float32 = a;
    } else {
      EXPECT_NE(a[0][0].log_prob, float32[0][0].log_prob) << "int8 searched with the float32 weights";
    }
  }
  untrained.clear_compute_type();
  {
    const models::ScopedComputeType scoped(untrained, nn::ComputeType::Float32);
    EXPECT_EQ(untrained.compute_type(), nn::ComputeType::Float32);
  }
  EXPECT_FALSE(untrained.compute_type().has_value());
}

// api::Translator keeps one nn::KVCacheStorage for all its batches: a batch's keys and values are
// written over the last batch's, so nothing of an earlier batch may show through, whether the
// next batch has fewer rows, longer limits or more rows (the storage then grows).
TEST_F(SearchTest, KeyValueStorageKeptAcrossBatchesGivesTheSameResults) {
  models::Transformer untrained(config(), 11);  // untrained: outputs of every length
  untrained.eval();
  std::vector<data::IdLine> all = sources();
  all.push_back({3, 4, 5});
  all.push_back({6, 8, 10, 12, 14, 3, 5, 7, 9, 11});
  const std::vector<std::vector<data::IdLine>> batches = {
      sources(), {all[4], all[0]}, {all[5], all[1], all[2]}, all, {all[3]}};
  for (const int beam : {1, 3}) {
    decoding::SearchOptions own, kept;
    own.beam_size = kept.beam_size = beam;
    own.n_best = kept.n_best = beam;
    kept.kv_storage = std::make_shared<nn::KVCacheStorage>();
    for (size_t n = 0; n < batches.size(); ++n) {
      const auto a = decoding::beam_search(untrained, batches[n], own);
      const auto b = decoding::beam_search(untrained, batches[n], kept);
      ASSERT_EQ(a.size(), b.size());
      const std::string where = ", batch " + std::to_string(n) + ", sentence ";
      for (size_t i = 0; i < a.size(); ++i)
        expect_identical(b[i], a[i], "beam " + std::to_string(beam) + where + std::to_string(i));
      const auto g = decoding::greedy_search(untrained, batches[n], kept);
      const auto h = decoding::greedy_search(untrained, batches[n], own);
      for (size_t i = 0; i < g.size(); ++i) expect_identical({g[i]}, {h[i]}, "greedy" + where + std::to_string(i));
    }
  }
}

// What api::Translator and training's validation run: sentences sorted by length into batches,
// results back in input order, each equal to searching its batch alone.
TEST_F(SearchTest, SearchInBatchesReturnsInputOrderAndSkipsEmptySources) {
  models::Transformer untrained(config(), 13);
  untrained.eval();
  const std::vector<data::IdLine> sources = {
      {4, 5, 6, 7, 8, 9, 10, 11}, {}, {3, 4}, {9, 10, 11, 12, 13}, {7}, {15, 14, 13, 12, 11, 10, 9}, {6, 6, 6}};
  for (const int beam : {1, 3}) {
    decoding::SearchOptions o;
    o.beam_size = o.n_best = beam;
    std::vector<std::pair<int64_t, int64_t>> progress;
    const auto found = decoding::search_in_batches(untrained, sources, o, 2,
                                                   [&](int64_t done, int64_t total) { progress.emplace_back(done, total); });
    ASSERT_EQ(found.size(), sources.size());
    EXPECT_TRUE(found[1].empty()) << "an empty source gets no hypothesis";
    EXPECT_EQ(progress, (std::vector<std::pair<int64_t, int64_t>>{{2, 6}, {4, 6}, {6, 6}}));
    // By length, 2 at a time: {4, 2}, {6, 3}, {5, 0}. (Bits depend on a batch's padding, so each
    // result is compared with its own batch searched directly.)
    for (const std::vector<size_t>& batch : {std::vector<size_t>{4, 2}, {6, 3}, {5, 0}}) {
      const auto direct = decoding::beam_search(untrained, {sources[batch[0]], sources[batch[1]]}, o);
      for (size_t k = 0; k < 2; ++k)
        expect_identical(found[batch[k]], direct[k], "beam " + std::to_string(beam) + ", sentence " + std::to_string(batch[k]));
    }
  }
  EXPECT_THROW(decoding::search_in_batches(untrained, sources, {}, 0), Error);
}

// What `qkv translate` runs to write results as they come: windows of sort_window sources in
// input order, each sorted by length into batches; every source of a window is handed over before
// any of the next (its empty ones first), each once, each equal to searching its batch alone.
TEST_F(SearchTest, SearchEachHandsOverWindowByWindow) {
  models::Transformer untrained(config(), 13);
  untrained.eval();
  const std::vector<data::IdLine> sources = {
      {4, 5, 6, 7, 8, 9, 10, 11}, {}, {3, 4}, {9, 10, 11, 12, 13}, {7}, {15, 14, 13, 12, 11, 10, 9}, {6, 6, 6}};
  for (const int beam : {1, 3}) {
    decoding::SearchOptions o;
    o.beam_size = o.n_best = beam;
    std::vector<size_t> handed;
    std::vector<std::vector<decoding::Hypothesis>> found(sources.size());
    std::vector<std::pair<int64_t, int64_t>> progress;
    decoding::search_each(
        untrained, sources, o, 2, 3,
        [&](size_t i, std::vector<decoding::Hypothesis>&& h) {
          handed.push_back(i);
          found[i] = std::move(h);
        },
        [&](int64_t done, int64_t total) { progress.emplace_back(done, total); });
    // Windows {0, 1, 2}, {3, 4, 5}, {6}; by length, 2 at a time: {2, 0}, then {4, 3}, {5}, then {6}.
    EXPECT_EQ(handed, (std::vector<size_t>{1, 2, 0, 4, 3, 5, 6}));
    EXPECT_EQ(progress, (std::vector<std::pair<int64_t, int64_t>>{{2, 6}, {4, 6}, {5, 6}, {6, 6}}));
    EXPECT_TRUE(found[1].empty()) << "an empty source gets no hypothesis";
    for (const std::vector<size_t>& batch : {std::vector<size_t>{2, 0}, {4, 3}, {5}, {6}}) {
      std::vector<data::IdLine> rows;
      for (size_t i : batch) rows.push_back(sources[i]);
      const auto direct = decoding::beam_search(untrained, rows, o);
      for (size_t k = 0; k < batch.size(); ++k)
        expect_identical(found[batch[k]], direct[k], "beam " + std::to_string(beam) + ", sentence " + std::to_string(batch[k]));
    }
  }
  const auto ignore = [](size_t, std::vector<decoding::Hypothesis>&&) {};
  EXPECT_THROW(decoding::search_each(untrained, sources, {}, 2, -1, ignore), Error);
}

TEST_F(SearchTest, NBestScoresEqualTeacherForcedScores) {
  models::Transformer untrained(config(), 3);
  untrained.eval();
  for (const models::Transformer* m : {&trained(), static_cast<const models::Transformer*>(&untrained)}) {
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
  models::Transformer model(config(), 5);
  model.eval();
  decoding::SearchOptions o;
  o.n_best = 5;
  o.beam_size = 2;
  EXPECT_THROW(decoding::beam_search(model, sources(), o), Error);
  EXPECT_THROW(decoding::greedy_search(model, {data::IdLine{}}, {}), Error);
  EXPECT_THROW(decoding::greedy_search(model, {data::IdLine(30, 5)}, {}), Error);  // longer than max_seq_length
}

// Each option out of its range is refused naming it, before any decoding (a beam of 100000 used
// to run for minutes on one sentence).
TEST_F(SearchTest, OptionsOutOfRangeAreRefusedNamingTheOption) {
  models::Transformer model(config(), 5);
  model.eval();
  const auto error_of = [&](const decoding::SearchOptions& o) -> std::string {
    try {
      decoding::beam_search(model, sources(), o);
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
  EXPECT_THROW(decoding::greedy_search(model, sources(), with([nan](auto& o) { o.max_length_ratio = nan; })), Error);
  // The largest beam the vocabulary allows works.
  EXPECT_EQ(error_of(with([](auto& o) { o.beam_size = o.n_best = 16; })), "<accepted>");
}

// Beam search over one sentence written out plainly from the rule (fairseq's sequence generator,
// CTranslate2): every step re-runs the model on each beam's whole prefix, ranks all (beam, token)
// continuations, and keeps the 2K best; an EOS among the first K finishes a hypothesis and the first
// K others are the next beams. With eos_anywhere, an EOS anywhere before the K-th beam is found
// finishes one instead: the rule qkv used before, kept here to show what it got wrong.
struct ReferenceHypothesis {
  std::vector<int32_t> tokens;
  double log_prob = 0, score = 0;
};
std::vector<ReferenceHypothesis> reference_beam_search(const models::Transformer& m, const data::IdLine& src, int64_t K,
                                                       int64_t limit, bool eos_anywhere) {
  NoGradGuard no_grad;
  const auto& c = m.config();
  struct Beam {
    std::vector<int32_t> tokens;
    double cum;
  };
  std::vector<Beam> beams = {{{}, 0.0}};
  std::vector<ReferenceHypothesis> done;
  const auto finish = [&](const Beam& b, double log_prob) {
    done.push_back({b.tokens, log_prob, log_prob / static_cast<double>(b.tokens.size() + 1)});
  };
  for (int64_t t = 0; t <= limit; ++t) {
    struct Cand {
      double lp;
      int64_t beam;
      int32_t token;
    };
    std::vector<Cand> cands;
    std::vector<std::vector<double>> log_probs;
    for (size_t k = 0; k < beams.size(); ++k) {
      data::IdLine tgt{c.bos_id};
      tgt.insert(tgt.end(), beams[k].tokens.begin(), beams[k].tokens.end());
      const Tensor logits = m.forward(Tensor::from_ids(Dims{1, static_cast<int64_t>(src.size())}, src),
                                      Tensor::from_ids(Dims{1, static_cast<int64_t>(tgt.size())}, tgt))
                                .value();
      const float* z = logits.f32() + (static_cast<int64_t>(tgt.size()) - 1) * c.tgt_vocab_size;
      double mx = z[0], sum = 0;
      for (int64_t v = 0; v < c.tgt_vocab_size; ++v) mx = std::max<double>(mx, z[v]);
      for (int64_t v = 0; v < c.tgt_vocab_size; ++v) sum += std::exp(z[v] - mx);
      std::vector<double> lp(static_cast<size_t>(c.tgt_vocab_size));
      for (int64_t v = 0; v < c.tgt_vocab_size; ++v) lp[v] = z[v] - mx - std::log(sum);
      log_probs.push_back(lp);
      for (int32_t v = 0; v < c.tgt_vocab_size; ++v)
        if (v != c.pad_id && v != c.bos_id) cands.push_back({beams[k].cum + lp[v], static_cast<int64_t>(k), v});
    }
    if (t == limit) {
      for (size_t k = 0; k < beams.size(); ++k) finish(beams[k], beams[k].cum + log_probs[k][c.eos_id]);
      break;
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.lp > b.lp; });
    cands.resize(std::min<size_t>(cands.size(), static_cast<size_t>(2 * K)));
    std::vector<Beam> next;
    for (size_t i = 0; i < cands.size() && static_cast<int64_t>(next.size()) < K; ++i) {
      const Beam& from = beams[static_cast<size_t>(cands[i].beam)];
      if (cands[i].token == c.eos_id) {
        if ((eos_anywhere || static_cast<int64_t>(i) < K) && static_cast<int64_t>(done.size()) < K) finish(from, cands[i].lp);
        continue;
      }
      next.push_back({from.tokens, cands[i].lp});
      next.back().tokens.push_back(cands[i].token);
    }
    if (static_cast<int64_t>(done.size()) >= K || next.empty()) break;
    beams = std::move(next);
  }
  std::stable_sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  return done;
}

// Beam search equals the plain reference of the rule, every hypothesis of the n-best list, on an
// untrained model (arbitrary, long outputs where EOS shows up at every rank). On the same sentences
// the old rule (finish an EOS ranked anywhere in the top 2K) returns a worse best hypothesis for
// some of them: it stops once K hypotheses finished, while better beams were still alive.
TEST_F(SearchTest, BeamSearchFollowsTheTopKEosRuleOfFairseqAndCTranslate2) {
  models::Transformer untrained(config(), 11);
  untrained.eval();
  std::vector<data::IdLine> src;
  std::mt19937 gen(5);
  for (int i = 0; i < 24; ++i) {
    data::IdLine line;
    const int64_t n = 2 + static_cast<int64_t>(gen() % 5);
    for (int64_t j = 0; j < n; ++j) line.push_back(static_cast<int32_t>(4 + gen() % 12));
    src.push_back(line);
  }
  const int64_t K = 3;
  decoding::SearchOptions o;
  o.beam_size = o.n_best = K;
  o.max_length_ratio = 1.f;
  o.max_length_offset = 4;
  const auto found = decoding::beam_search(untrained, src, o);
  int old_rule_worse = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const int64_t limit = static_cast<int64_t>(src[i].size()) + 4;
    const auto want = reference_beam_search(untrained, src[i], K, limit, false);
    ASSERT_EQ(found[i].size(), want.size()) << "sentence " << i;
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(found[i][j].tokens, want[j].tokens) << "sentence " << i << " hypothesis " << j;
      EXPECT_NEAR(found[i][j].log_prob, want[j].log_prob, 1e-4) << "sentence " << i << " hypothesis " << j;
    }
    const auto old_rule = reference_beam_search(untrained, src[i], K, limit, true);
    if (old_rule[0].score < want[0].score - 1e-6) ++old_rule_worse;
  }
  EXPECT_GT(old_rule_worse, 0) << "no sentence shows the difference: choose other sentences";
}

}  // namespace
}  // namespace qkv
