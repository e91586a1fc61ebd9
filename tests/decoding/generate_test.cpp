// Generation with a decoder-only model (decoding/generate.h) on small random CausalLMs: greedy
// through the key/value cache equals greedy by recomputing the whole sequence each step; a batch
// (prompts of different lengths, left-padded) gives each prompt what it gets alone, also when some
// rows stop at EOS and are dropped; EOS ends a row and is not output; the token budget and the
// context limit are respected; long prompts are refused or cut from the left.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "qkv/autograd/graph.h"
#include "qkv/core/error.h"
#include "qkv/decoding/generate.h"
#include "decoding/small_causal_lm.h"

namespace qkv {
namespace {

using testing::small_config;
using testing::small_model;

using Tokens = std::vector<int32_t>;

const std::vector<Tokens> kBatchPrompts = {{2, 7, 9, 11}, {2}, {2, 30, 31, 5, 6, 8, 12, 13, 1}, {2, 17, 17}};

// Greedy by running the whole sequence through forward() for every new token (no cache).
Tokens greedy_by_recomputation(const models::CausalLM& model, Tokens seq, int64_t n, bool stop_at_eos) {
  NoGradGuard no_grad;
  const int64_t V = model.output_vocab_size();
  Tokens out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    const Tensor logits = model.forward(Tensor::from_ids(Dims{1, T}, seq)).value().contiguous();  // (1, T, V)
    const int32_t token = decoding::argmax_token(logits.f32() + (T - 1) * V, V);
    if (stop_at_eos && token == model.config().eos_id) break;
    out.push_back(token);
    seq.push_back(token);
  }
  return out;
}

decoding::GenerateOptions greedy(int64_t n, bool stop_at_eos = false) {
  decoding::GenerateOptions o;
  o.max_new_tokens = n;
  o.stop_at_eos = stop_at_eos;
  return o;
}

decoding::GenerateOptions sampled(int64_t n, uint64_t seed) {
  decoding::GenerateOptions o = greedy(n);
  o.sample = true;
  o.seed = seed;
  o.sampling.temperature = 1.5;  // flat enough that draws differ from the argmax
  return o;
}

TEST(Generate, GreedyWithTheCacheEqualsFullRecomputation) {
  const auto model = small_model();
  const auto out = decoding::generate(*model, kBatchPrompts, {}, greedy(10));
  ASSERT_EQ(out.size(), kBatchPrompts.size());
  for (size_t i = 0; i < kBatchPrompts.size(); ++i) {
    EXPECT_EQ(out[i].size(), 10u);
    EXPECT_EQ(out[i], greedy_by_recomputation(*model, kBatchPrompts[i], 10, false)) << "prompt " << i;
  }
}

TEST(Generate, BatchedEqualsOneByOne) {
  const auto model = small_model();
  for (const auto& options : {greedy(12), sampled(12, 99)}) {
    const auto batched = decoding::generate(*model, kBatchPrompts, {}, options);
    for (size_t i = 0; i < kBatchPrompts.size(); ++i) {
      const auto alone = decoding::generate(*model, {kBatchPrompts[i]}, {i}, options);
      EXPECT_EQ(batched[i], alone[0]) << "prompt " << i << (options.sample ? " (sampled)" : " (greedy)");
    }
  }
}

// api::Generator hands one set of packs and one key/value storage to all its batches: each batch
// writes over the last one's keys and values, with fewer rows, more rows or longer prompts.
TEST(Generate, KeyValueStorageSharedByBatchesGivesTheSameTokens) {
  const auto model = small_model();
  const std::vector<std::vector<Tokens>> batches = {
      {kBatchPrompts[0], kBatchPrompts[3]}, {kBatchPrompts[1]}, kBatchPrompts, {kBatchPrompts[2], kBatchPrompts[2]}};
  for (const auto& options : {greedy(12), sampled(12, 99)}) {
    decoding::GenerateOptions shared = options;
    shared.kv_storage = std::make_shared<nn::KVCacheStorage>();
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto own = decoding::generate(*model, batches[b], {}, options);
      const auto kept = decoding::generate(*model, batches[b], {}, shared);
      EXPECT_EQ(kept, own) << "batch " << b << (options.sample ? " (sampled)" : " (greedy)");
    }
  }
}

TEST(Generate, SamplingDependsOnSeedAndLineKey) {
  const auto model = small_model();
  const Tokens p = kBatchPrompts[0];
  const auto a = decoding::generate(*model, {p, p}, {0, 1}, sampled(15, 1));
  const auto b = decoding::generate(*model, {p}, {0}, sampled(15, 1));
  const auto c = decoding::generate(*model, {p}, {0}, sampled(15, 2));
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[0], a[1]);  // same prompt, other line: another stream
  EXPECT_NE(b[0], c[0]);  // another seed
  EXPECT_NE(b[0], decoding::generate(*model, {p}, {0}, greedy(15))[0]);
}

TEST(Generate, StopsAtEosWithoutOutputtingIt) {
  // A model whose EOS is a token that prompt 0's free run produces at k >= 1 and not before.
  for (const auto& options : {greedy(12), sampled(12, 7)}) {
    const Tokens free_run = decoding::generate(*small_model(), {kBatchPrompts[0]}, {}, options)[0];
    size_t k = 1;
    while (k < free_run.size() && std::find(free_run.begin(), free_run.begin() + static_cast<long>(k), free_run[k]) !=
                                      free_run.begin() + static_cast<long>(k))
      ++k;
    ASSERT_LT(k, free_run.size()) << "no new token in the free run";
    const auto model = small_model(free_run[k]);  // same seed: same weights, another eos_id
    decoding::GenerateOptions stop = options;
    stop.stop_at_eos = true;
    const auto stopped = decoding::generate(*model, kBatchPrompts, {}, stop);
    EXPECT_EQ(stopped[0], Tokens(free_run.begin(), free_run.begin() + static_cast<long>(k)));
    // Rows that stop early are dropped from the batch; the others go on as they would alone.
    for (size_t i = 0; i < kBatchPrompts.size(); ++i) {
      if (!options.sample) {
        EXPECT_EQ(stopped[i], greedy_by_recomputation(*model, kBatchPrompts[i], 12, true)) << "prompt " << i;
      }
      EXPECT_EQ(stopped[i], decoding::generate(*model, {kBatchPrompts[i]}, {i}, stop)[0]) << "prompt " << i;
    }
    // Without stop_at_eos, EOS is a token like any other.
    EXPECT_EQ(decoding::generate(*model, {kBatchPrompts[0]}, {}, options)[0], free_run);
  }
}

TEST(Generate, CallbackSeesEveryTokenInOrder) {
  const auto model = small_model();
  std::vector<Tokens> seen(kBatchPrompts.size());
  const auto out = decoding::generate(*model, kBatchPrompts, {}, sampled(7, 3),
                                      [&](size_t row, int32_t token) { seen.at(row).push_back(token); });
  EXPECT_EQ(seen, out);
}

TEST(Generate, BudgetAndContext) {
  const auto model = small_model();  // max_seq_length 24
  EXPECT_EQ(decoding::generate(*model, kBatchPrompts, {}, greedy(0)), std::vector<Tokens>(kBatchPrompts.size()));
  EXPECT_EQ(decoding::generate(*model, {kBatchPrompts[1]}, {}, greedy(1))[0].size(), 1u);
  // Prompt + new tokens never exceed the context: 23 prompt tokens leave room for 1, 20 for 4.
  Tokens p23(23, 9), p20(20, 9), p24(24, 9), p30(30, 9);
  p23[0] = p20[0] = 2;
  const auto out = decoding::generate(*model, {p23, p20, kBatchPrompts[0]}, {}, greedy(10));
  EXPECT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[1].size(), 4u);
  EXPECT_EQ(out[2].size(), 10u);
  EXPECT_EQ(out[1], greedy_by_recomputation(*model, p20, 4, false));
  // A prompt that leaves no room is refused, or cut to its last max_seq_length - max_new_tokens.
  EXPECT_THROW(decoding::generate(*model, {p24}, {}, greedy(5)), Error);
  for (size_t i = 0; i < p30.size(); ++i) p30[i] = static_cast<int32_t>(4 + i);
  decoding::GenerateOptions cut = greedy(5);
  cut.long_prompt = decoding::LongPrompt::TruncateLeft;
  const Tokens last19(p30.end() - 19, p30.end());
  EXPECT_EQ(decoding::generate(*model, {p30}, {}, cut)[0], greedy_by_recomputation(*model, last19, 5, false));
  const decoding::FittedPrompt f = decoding::fit_prompt(p30, 24, cut);
  EXPECT_TRUE(f.truncated);
  EXPECT_EQ(f.tokens, last19);
  EXPECT_EQ(f.new_tokens, 5);
  // max_new_tokens >= the context: one prompt token stays, max_seq_length - 1 new ones.
  cut.max_new_tokens = 40;
  const decoding::FittedPrompt g = decoding::fit_prompt(p30, 24, cut);
  EXPECT_EQ(g.tokens, Tokens{p30.back()});
  EXPECT_EQ(g.new_tokens, 23);
  EXPECT_EQ(decoding::generate(*model, {p30}, {}, cut)[0].size(), 23u);
  // A prompt that leaves room for max_new_tokens is not cut.
  cut.max_new_tokens = 20;
  EXPECT_FALSE(decoding::fit_prompt(kBatchPrompts[0], 24, cut).truncated);
  EXPECT_EQ(decoding::fit_prompt(kBatchPrompts[0], 24, cut).new_tokens, 20);
}

TEST(Generate, RefusesBadPromptsAndOptions) {
  const auto model = small_model();
  EXPECT_THROW(decoding::generate(*model, {Tokens{}}, {}, greedy(3)), Error);
  EXPECT_THROW(decoding::generate(*model, {Tokens{2, 40}}, {}, greedy(3)), Error);  // V = 40
  EXPECT_THROW(decoding::generate(*model, {Tokens{2, -1}}, {}, greedy(3)), Error);
  EXPECT_THROW(decoding::generate(*model, kBatchPrompts, {0, 1}, greedy(3)), Error);  // keys != prompts
  decoding::GenerateOptions bad = sampled(3, 0);
  bad.sampling.top_p = 0;
  try {
    decoding::generate(*model, kBatchPrompts, {}, bad);
    FAIL() << "top_p 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--top-p"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
