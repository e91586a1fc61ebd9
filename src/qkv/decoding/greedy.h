// Greedy search and sampling written once for every family, over beam.h's DecoderSteps: a seq2seq
// model's decoder (search.h) and a causal LM (generate.h) each implement it, and both run
// greedy_search_steps below, as both run beam_search_steps.
//
// Each step every row takes one token: the argmax, or a draw (sampling.h), of its logits after the
// rules (constraints.h), as transformers' greedy search and sampling choose. A row ends with EOS,
// or at its limit (BeamLimit: a seq2seq translation takes EOS there, a causal LM's generation is
// cut). Rows that ended leave the batch, so the decoder only runs on rows in progress.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/decoding/beam.h"
#include "qkv/decoding/sampling.h"

namespace qkv::decoding {

struct GreedySettings {
  StepRules rules;
  BeamLimit at_limit = BeamLimit::EndWithEos;
  // false: EOS is a token like any other and the row goes on to its limit (a causal LM's
  // --ignore-eos; with BeamLimit::Cut only).
  bool stop_at_eos = true;
  bool sample = false;  // a draw from sampling.h instead of the argmax, keyed by (seed, key, step)
  SamplingOptions sampling;
  uint64_t seed = 0;
  // Whether the hypotheses' log_prob and score are wanted (the log-probabilities after the rules,
  // as beam search sums them); a causal LM's generation returns only tokens and skips them.
  bool log_probs = true;
  float length_penalty = 1.0f;
};

// Each line's random-stream key: `line_keys` as given, or, when empty, 0, 1, ..., n - 1.
std::vector<uint64_t> keys_or_indices(const std::vector<uint64_t>& line_keys, size_t n);

// Hears row `sentence`'s tokens as they are chosen (not the EOS that ends it).
using TokenChosen = std::function<void(size_t sentence, int32_t token)>;

// Greedy search (or sampling) of B sentences, one decoder row each (row b is sentence b at the
// start): `contexts[b]` is what the rules read before sentence b's new tokens (constraints.h),
// `limits[b]` (>= 1) its most new tokens, `keys[b]` its random stream. Returns each sentence's
// hypothesis, with the step and row of its last token (to trace attention weights back).
std::vector<FoundHypothesis> greedy_search_steps(DecoderSteps& decoder, const std::vector<std::vector<int32_t>>& contexts,
                                                 const std::vector<int64_t>& limits, const std::vector<uint64_t>& keys,
                                                 const GreedySettings& settings, const TokenChosen& on_token = {});

}  // namespace qkv::decoding
