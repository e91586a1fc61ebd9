// Constraints on the next token, shared by every search (greedy, sampling, beam) of every family
// (seq2seq: search.h; causal LM: generate.h), as transformers' logits processors define them:
//   - repetition_penalty (RepetitionPenaltyLogitsProcessor): each distinct token already in the
//     row (the prompt, or the decoder start, and the tokens generated) has its score divided by
//     the penalty when positive, multiplied by it when negative;
//   - no_repeat_ngram_size n (NoRepeatNGramLogitsProcessor): a token that would complete an n-gram
//     already in the row gets -inf;
//   - a minimum length (MinLengthLogitsProcessor / MinNewTokensLengthLogitsProcessor): EOS gets
//     -inf while the row is shorter;
//   - a forced first token (ForcedBOSTokenLogitsProcessor): every other token -inf, it 0.
// They apply in that order. Like transformers, greedy and sampling apply them to the logits and beam
// search to the log-probabilities (which are not normalised again), so a repetition penalty ranks
// tokens differently in greedy search and in beam search of width 1.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace qkv::decoding {

inline constexpr float kMaxRepetitionPenalty = 1000.f;
inline constexpr int64_t kMaxNoRepeatNgramSize = 1 << 20;

struct TokenConstraints {
  float repetition_penalty = 1.0f;   // in (0, kMaxRepetitionPenalty]; 1 = off; > 1 discourages repeats
  int64_t no_repeat_ngram_size = 0;  // in [0, kMaxNoRepeatNgramSize]; 0 = off
};

// Throws qkv::Error naming the CLI flag (--repetition-penalty, --no-repeat-ngram-size) of the
// option that is out of its range.
void validate_token_constraints(const TokenConstraints& constraints);

// Everything a search applies to one row's scores at one step.
struct StepRules {
  TokenConstraints constraints;
  std::vector<int32_t> never;  // ids never chosen (a seq2seq target's pad and decoder start)
  int32_t eos_id = -1;
  int64_t min_new_tokens = 0;  // EOS gets -inf at steps (tokens generated so far) below this
  int32_t forced_first = -1;   // >= 0: the only token of step 0, with score 0
  // Whether the rules read the row's tokens (otherwise history may be left empty).
  bool read_history() const {
    return constraints.repetition_penalty != 1.0f || constraints.no_repeat_ngram_size > 0;
  }
  // Whether they change anything at all at `step`.
  bool active(int64_t step) const {
    return read_history() || !never.empty() || step < min_new_tokens || (step == 0 && forced_first >= 0);
  }
};

// A row's tokens as the rules read them: the context (a causal LM's prompt; a seq2seq decoder's
// start token) followed by the tokens generated so far (`step` of them).
struct RowHistory {
  std::span<const int32_t> context, generated;
};

// Applies the rules to `scores` (vocab entries) in place, at step row.generated.size().
// `at_limit`: the row must end here (a seq2seq search's length limit), so the minimum length gives
// way.
void apply_step_rules(float* scores, int64_t vocab, const RowHistory& row, const StepRules& rules, bool at_limit = false);

}  // namespace qkv::decoding
