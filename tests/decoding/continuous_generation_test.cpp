// Continuous batching (decoding/continuous_generation.h) on small random CausalLMs: sequences that
// join a running batch at different steps, with different options, get exactly the tokens
// decoding::generate gives each alone; EOS, budgets and the context end them as generate does;
// cancelled ones stop at once without touching the others; the batch never exceeds its size,
// joining rows go in place where they fit, and the cache does not grow with the time it has run.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "decoding/small_causal_lm.h"
#include "qkv/core/buffer_pool.h"
#include "qkv/core/error.h"
#include "qkv/decoding/continuous_generation.h"

namespace qkv {
namespace {

using testing::small_config;
using testing::small_model;
using Tokens = std::vector<int32_t>;
using decoding::ContinuousGeneration;
using decoding::SequenceEnd;
using decoding::SequenceOptions;

const std::vector<Tokens> kPrompts = {{2, 7, 9, 11}, {2}, {2, 30, 31, 5, 6, 8, 12, 13, 1}, {2, 17, 17}, {2, 5}};

SequenceOptions options_of(int64_t n, bool sample, uint64_t key, bool stop_at_eos = false) {
  SequenceOptions o;
  o.max_new_tokens = n;
  o.sample = sample;
  o.sampling.temperature = 1.5;  // flat enough that draws differ from the argmax
  o.seed = 99;
  o.key = key;
  o.stop_at_eos = stop_at_eos;
  return o;
}

// What generate gives the prompt alone with the same options.
Tokens alone(const models::CausalLM& model, const Tokens& prompt, const SequenceOptions& s) {
  decoding::GenerateOptions o;
  o.max_new_tokens = s.max_new_tokens;
  o.sample = s.sample;
  o.sampling = s.sampling;
  o.seed = s.seed;
  o.stop_at_eos = s.stop_at_eos;
  o.min_new_tokens = s.min_new_tokens;
  o.constraints = s.constraints;
  return decoding::generate(model, {prompt}, {s.key}, o)[0];
}

// options_of with the token rules (constraints.h).
SequenceOptions ruled(SequenceOptions o, float repetition_penalty, int64_t no_repeat_ngram_size,
                      int64_t min_new_tokens = 0) {
  o.constraints.repetition_penalty = repetition_penalty;
  o.constraints.no_repeat_ngram_size = no_repeat_ngram_size;
  o.min_new_tokens = min_new_tokens;
  return o;
}

struct Outcome {
  Tokens tokens;
  SequenceEnd end = SequenceEnd::None;
  int ended = 0;  // end events seen (exactly one expected)
};

// Runs steps until nothing is left, adding arrivals[s] (prompt index, options) before step s.
std::map<uint64_t, Outcome> run(ContinuousGeneration& gen,
                                const std::map<int, std::vector<std::pair<Tokens, SequenceOptions>>>& arrivals,
                                std::map<uint64_t, size_t>* order = nullptr, size_t* most_running = nullptr) {
  std::map<uint64_t, Outcome> out;
  size_t added = 0;
  for (int step = 0; step < 200; ++step) {
    if (auto it = arrivals.find(step); it != arrivals.end())
      for (const auto& [prompt, o] : it->second) {
        const uint64_t id = gen.add(prompt, o);
        if (order) (*order)[id] = added;
        ++added;
      }
    if (gen.empty() && step > arrivals.rbegin()->first) break;
    for (const auto& e : gen.step()) {
      Outcome& r = out[e.id];
      EXPECT_EQ(r.ended, 0) << "sequence " << e.id << " had an event after its end";
      if (e.token >= 0) r.tokens.push_back(e.token);
      if (e.end != SequenceEnd::None) {
        r.end = e.end;
        ++r.ended;
      }
    }
    if (most_running) *most_running = std::max(*most_running, gen.running());
  }
  EXPECT_TRUE(gen.empty());
  return out;
}

TEST(ContinuousGeneration, SequencesJoiningAtAnyStepGetWhatGenerateGivesThemAlone) {
  const auto model = small_model();
  // Greedy and sampled rows mixed, with different budgets, arriving at steps 0, 0, 3, 4, 4, 9.
  std::map<int, std::vector<std::pair<Tokens, SequenceOptions>>> arrivals = {
      {0, {{kPrompts[0], options_of(12, false, 0)}, {kPrompts[1], options_of(7, true, 1)}}},
      {3, {{kPrompts[2], options_of(10, true, 2)}}},
      {4, {{kPrompts[3], options_of(14, false, 3)}, {kPrompts[4], options_of(3, true, 4)}}},
      {9, {{kPrompts[2], options_of(9, false, 5)}}}};
  ContinuousGeneration gen(*model, 8, 4096);
  std::map<uint64_t, size_t> order;
  const auto out = run(gen, arrivals, &order);
  ASSERT_EQ(out.size(), 6u);
  std::vector<std::pair<Tokens, SequenceOptions>> all;
  for (const auto& [step, list] : arrivals) all.insert(all.end(), list.begin(), list.end());
  for (const auto& [id, r] : out) {
    const auto& [prompt, o] = all[order.at(id)];
    EXPECT_EQ(r.tokens, alone(*model, prompt, o)) << "sequence " << id;
    EXPECT_EQ(r.ended, 1);
    EXPECT_EQ(r.end, SequenceEnd::Length);
  }
}

TEST(ContinuousGeneration, SequencesWithTheirOwnTokenRulesGetWhatGenerateGivesThem) {
  // A model whose EOS is a token prompt 0's greedy run produces early, so that min_new_tokens shows.
  const auto probe = small_model();
  const Tokens free_run = alone(*probe, kPrompts[0], options_of(12, false, 0));
  const auto model = small_model(free_run[2]);
  // Each rule, greedy and sampled, beside rows without rules, arriving at steps 0, 0, 2, 3, 5.
  const std::vector<std::pair<Tokens, SequenceOptions>> rows = {
      {kPrompts[0], ruled(options_of(12, false, 0, true), 1.0f, 0, 6)},
      {kPrompts[2], ruled(options_of(12, false, 1), 2.0f, 0)},  // (EOS a token: greedy would end at once)
      {kPrompts[2], ruled(options_of(12, true, 2, true), 1.0f, 1)},
      {kPrompts[0], options_of(12, false, 3, true)},
      {kPrompts[3], ruled(options_of(12, true, 4, true), 0.5f, 1, 4)}};
  for (const auto& [prompt, o] : rows) {
    SequenceOptions without = o;
    without.constraints = {};
    without.min_new_tokens = 0;
    if (o.min_new_tokens > 0 || o.constraints.repetition_penalty != 1.0f || o.constraints.no_repeat_ngram_size > 0) {
      EXPECT_NE(alone(*model, prompt, o), alone(*model, prompt, without)) << "the rules change key " << o.key;
    }
  }
  ContinuousGeneration gen(*model, 8, 4096);
  std::map<uint64_t, size_t> order;
  const auto out = run(gen, {{0, {rows[0], rows[1]}}, {2, {rows[2]}}, {3, {rows[3]}}, {5, {rows[4]}}}, &order);
  ASSERT_EQ(out.size(), rows.size());
  for (const auto& [id, r] : out) {
    const auto& [prompt, o] = rows[order.at(id)];
    EXPECT_EQ(r.tokens, alone(*model, prompt, o)) << "sequence " << id;
  }
  EXPECT_GE(out.at(1).tokens.size(), 6u);  // min_new_tokens held EOS back
  EXPECT_THROW(gen.add(kPrompts[0], ruled(options_of(4, false, 0), 0.0f, 0)), Error);
  EXPECT_THROW(gen.add(kPrompts[0], ruled(options_of(4, false, 0), 1.0f, -1)), Error);
  EXPECT_THROW(gen.add(kPrompts[0], ruled(options_of(4, false, 0), 1.0f, 0, -1)), Error);
}

TEST(ContinuousGeneration, EosEndsASequenceWithoutBeingOutput) {
  // A model whose EOS is a token that prompt 0's greedy run produces at k >= 1.
  const auto probe = small_model();
  const Tokens free_run = alone(*probe, kPrompts[0], options_of(12, false, 0));
  const auto model = small_model(free_run[3]);
  ContinuousGeneration gen(*model, 4, 4096);
  const auto out = run(gen, {{0, {{kPrompts[0], options_of(12, false, 0, true)}}},
                             {2, {{kPrompts[3], options_of(12, false, 1, true)}}}});
  ASSERT_EQ(out.size(), 2u);
  const Outcome& first = out.begin()->second;
  EXPECT_EQ(first.end, SequenceEnd::Eos);
  EXPECT_EQ(first.tokens, alone(*model, kPrompts[0], options_of(12, false, 0, true)));
  EXPECT_LT(first.tokens.size(), 12u);
  EXPECT_EQ(std::next(out.begin())->second.tokens, alone(*model, kPrompts[3], options_of(12, false, 1, true)));
}

TEST(ContinuousGeneration, BudgetsFollowTheContextAsGenerateDoes) {
  const auto model = small_model();
  const int64_t context = small_config().max_seq_length;  // 24
  Tokens long_prompt(static_cast<size_t>(context - 3), 5);
  long_prompt[0] = 2;
  ContinuousGeneration gen(*model, 4, 4096);
  const auto out = run(gen, {{0, {{kPrompts[0], options_of(30, false, 0)}, {long_prompt, options_of(30, false, 1)}}},
                             {1, {{kPrompts[1], options_of(0, false, 2)}}}});
  ASSERT_EQ(out.size(), 3u);
  auto it = out.begin();
  EXPECT_EQ(it->second.tokens.size(), static_cast<size_t>(context - 4));  // 4-token prompt
  EXPECT_EQ(it->second.tokens, alone(*model, kPrompts[0], options_of(30, false, 0)));
  ++it;
  EXPECT_EQ(it->second.tokens.size(), 3u);
  ++it;
  EXPECT_TRUE(it->second.tokens.empty());  // no token asked: ends at the next step
  EXPECT_EQ(it->second.end, SequenceEnd::Length);
  // Too long to leave a token: refused as generate refuses it; cut from the left when asked.
  ContinuousGeneration strict(*model, 4, 4096);
  EXPECT_THROW(strict.add(Tokens(static_cast<size_t>(context), 2), options_of(5, false, 0)), Error);
  SequenceOptions cut = options_of(5, false, 0);
  cut.long_prompt = decoding::LongPrompt::TruncateLeft;
  EXPECT_NO_THROW(strict.add(Tokens(static_cast<size_t>(context), 2), cut));
}

TEST(ContinuousGeneration, CancelledSequencesStopAndTheOthersAreUntouched) {
  const auto model = small_model();
  ContinuousGeneration gen(*model, 4, 4096);
  const uint64_t a = gen.add(kPrompts[0], options_of(12, false, 0));
  const uint64_t b = gen.add(kPrompts[2], options_of(12, true, 1));
  const uint64_t waiting = gen.add(kPrompts[3], options_of(12, false, 2));
  gen.cancel(waiting);  // before it ever ran
  std::map<uint64_t, Tokens> got;
  for (int step = 0; !gen.empty(); ++step) {
    if (step == 4) gen.cancel(b);
    for (const auto& e : gen.step()) {
      EXPECT_NE(e.id, waiting);
      if (e.token >= 0) got[e.id].push_back(e.token);
    }
  }
  EXPECT_EQ(got[a], alone(*model, kPrompts[0], options_of(12, false, 0)));
  const Tokens b_alone = alone(*model, kPrompts[2], options_of(12, true, 1));
  EXPECT_EQ(got[b], Tokens(b_alone.begin(), b_alone.begin() + 4));
  gen.cancel(12345);  // unknown: ignored
}

TEST(ContinuousGeneration, AtMostMaxSequencesRunAndTheCacheStaysBounded) {
  const auto model = small_model();
  // 40 sequences arriving two by two, every step, through a batch of 3: the batch never empties for
  // long, so rows keep joining a batch that has run for many steps.
  std::map<int, std::vector<std::pair<Tokens, SequenceOptions>>> arrivals;
  for (int s = 0; s < 20; ++s)
    arrivals[s] = {{kPrompts[static_cast<size_t>(s) % kPrompts.size()], options_of(5 + s % 7, s % 2 == 1, 2 * s)},
                   {kPrompts[static_cast<size_t>(s + 2) % kPrompts.size()], options_of(8, false, 2 * s + 1)}};
  ContinuousGeneration gen(*model, 3, 4096);
  std::map<uint64_t, size_t> order;
  size_t most = 0;
  int64_t widest = 0;
  std::vector<std::pair<Tokens, SequenceOptions>> all;
  for (const auto& [step, list] : arrivals) all.insert(all.end(), list.begin(), list.end());
  std::map<uint64_t, Tokens> got;
  for (int step = 0; step < 400 && (step < 20 || !gen.empty()); ++step) {
    if (auto it = arrivals.find(step); it != arrivals.end())
      for (const auto& [prompt, o] : it->second) {
        const size_t index = order.size();
        order[gen.add(prompt, o)] = index;
      }
    for (const auto& e : gen.step())
      if (e.token >= 0) got[e.id].push_back(e.token);
    most = std::max(most, gen.running());
    widest = std::max(widest, gen.cache_length());
  }
  EXPECT_TRUE(gen.empty());
  EXPECT_EQ(most, 3u);
  // Rows joined in place mostly; the state was made again (compacted) when they could not be.
  EXPECT_GT(gen.appends(), gen.rebuilds());
  EXPECT_GT(gen.rebuilds(), 1);
  // The width stays within three contexts (72) whatever the run's length (over 40 steps here).
  EXPECT_LE(widest, 3 * small_config().max_seq_length);
  ASSERT_EQ(got.size(), 40u);
  for (const auto& [id, tokens] : got) {
    const auto& [prompt, o] = all[order.at(id)];
    EXPECT_EQ(tokens, alone(*model, prompt, o)) << "sequence " << id;
  }
}

TEST(ContinuousGeneration, PrefillTokensPerStepAreBounded) {
  const auto model = small_model();
  // 9 + 4 > 10 prompt tokens: the second prompt waits one step.
  ContinuousGeneration gen(*model, 8, 10);
  gen.add(kPrompts[2], options_of(4, false, 0));
  gen.add(kPrompts[0], options_of(4, false, 1));
  gen.step();
  EXPECT_EQ(gen.running(), 1u);
  EXPECT_EQ(gen.waiting(), 1u);
  gen.step();
  EXPECT_EQ(gen.running(), 2u);
}

// Out of memory (here a memory limit on the CPU's pool, as `qkv serve --max-memory` sets one):
// under a range of limits, from one that leaves room for the whole batch down to one that fits no
// sequence, every sequence either gets exactly the tokens generate gives it alone (preempted and
// prefilled again as often as it takes) or, when it does not fit with nothing else running, ends
// with an OutOfMemory event after a prefix of them. Some limit preempts and still completes every
// sequence; some fails one.
TEST(ContinuousGeneration, OutOfMemoryPreemptsTheBatchAndFailsOnlyASequenceThatCannotRunAlone) {
  const auto model = small_model();
  std::map<int, std::vector<std::pair<Tokens, SequenceOptions>>> arrivals;
  for (int s = 0; s < 8; ++s)
    arrivals[s < 6 ? 0 : 3].push_back({kPrompts[static_cast<size_t>(s) % kPrompts.size()], options_of(10 + s % 4, s % 2 == 1, s)});
  std::vector<std::pair<Tokens, SequenceOptions>> all;
  for (const auto& [step, list] : arrivals) all.insert(all.end(), list.begin(), list.end());
  std::vector<Tokens> expected;
  for (const auto& [prompt, o] : all) expected.push_back(alone(*model, prompt, o));

  struct Result {
    int64_t preemptions = 0;
    size_t failed = 0, completed = 0;
  };
  struct LimitLifted {  // whatever happens, the tests after this one run without a limit
    ~LimitLifted() { BufferPool::set_memory_limit(0); }
  } lifted;
  const auto run_under = [&](int64_t extra_bytes) {
    BufferPool::trim();
    const PoolStats base = BufferPool::stats();
    BufferPool::set_memory_limit(base.bytes_live + base.bytes_unpooled + extra_bytes);
    ContinuousGeneration gen(*model, 8, 4096);
    std::map<uint64_t, size_t> order;
    std::map<uint64_t, Tokens> got;
    std::map<uint64_t, SequenceEnd> ends;
    for (int step = 0; step < 2000 && (step <= 3 || !gen.empty()); ++step) {
      if (auto it = arrivals.find(step); it != arrivals.end())
        for (const auto& [prompt, o] : it->second) {
          const size_t index = order.size();
          order[gen.add(prompt, o)] = index;
        }
      for (const auto& e : gen.step()) {
        EXPECT_EQ(ends.count(e.id), 0u) << "sequence " << e.id << " had an event after its end";
        if (e.token >= 0) got[e.id].push_back(e.token);
        if (e.end == SequenceEnd::OutOfMemory) {
          EXPECT_NE(e.error.find("--max-memory"), std::string::npos) << e.error;
        }
        if (e.end != SequenceEnd::None) ends[e.id] = e.end;
      }
    }
    BufferPool::set_memory_limit(0);
    EXPECT_TRUE(gen.empty());
    Result r;
    r.preemptions = gen.preemptions();
    EXPECT_EQ(ends.size(), all.size()) << "limit +" << extra_bytes;
    for (const auto& [id, end] : ends) {
      const Tokens& want = expected[order.at(id)];
      const Tokens& have = got[id];
      if (end == SequenceEnd::OutOfMemory) {
        ++r.failed;
        EXPECT_LE(have.size(), want.size());
        EXPECT_EQ(have, Tokens(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(std::min(have.size(), want.size()))))
            << "sequence " << id << " under limit +" << extra_bytes;
      } else {
        ++r.completed;
        EXPECT_EQ(have, want) << "sequence " << id << " under limit +" << extra_bytes;
      }
    }
    return r;
  };
  bool preempted_and_completed = false, failed_some = false;
  for (int64_t extra = int64_t{1} << 20; extra >= 1024; extra = extra * 2 / 3) {
    const Result r = run_under(extra);
    preempted_and_completed = preempted_and_completed || (r.preemptions > 0 && r.failed == 0);
    failed_some = failed_some || r.failed > 0;
    if (r.completed == 0) break;
  }
  EXPECT_TRUE(preempted_and_completed) << "no limit preempted the batch and still completed every sequence";
  EXPECT_TRUE(failed_some) << "no limit was too small for a sequence alone";
  EXPECT_NO_THROW(run_under(int64_t{64} << 20));  // and a roomy limit changes nothing
}

TEST(ContinuousGeneration, RefusesBadPromptsAndOptions) {
  const auto model = small_model();
  ContinuousGeneration gen(*model, 4, 4096);
  EXPECT_THROW(gen.add({}, options_of(4, false, 0)), Error);
  EXPECT_THROW(gen.add({2, 40}, options_of(4, false, 0)), Error);  // vocabulary 40
  EXPECT_THROW(gen.add({2}, options_of(-1, false, 0)), Error);
  SequenceOptions bad = options_of(4, true, 0);
  bad.sampling.top_p = 0;
  EXPECT_THROW(gen.add({2}, bad), Error);
  EXPECT_TRUE(gen.empty());
}

}  // namespace
}  // namespace qkv
