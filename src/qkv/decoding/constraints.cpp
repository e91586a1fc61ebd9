#include "qkv/decoding/constraints.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"

namespace qkv::decoding {

void validate_token_constraints(const TokenConstraints& c) {
  QKV_CHECK(std::isfinite(c.repetition_penalty) && c.repetition_penalty > 0.f &&
                c.repetition_penalty <= kMaxRepetitionPenalty,
            "--repetition-penalty: must be in (0, " << kMaxRepetitionPenalty << "] (1 = off), got "
                                                    << c.repetition_penalty);
  QKV_CHECK(c.no_repeat_ngram_size >= 0 && c.no_repeat_ngram_size <= kMaxNoRepeatNgramSize,
            "--no-repeat-ngram-size: must be in [0, " << kMaxNoRepeatNgramSize << "] (0 = off), got "
                                                      << c.no_repeat_ngram_size);
}

namespace {
constexpr float kForbidden = -std::numeric_limits<float>::infinity();

// The row's tokens in one sequence (context, then generated).
std::vector<int32_t> whole_row(const RowHistory& row) {
  std::vector<int32_t> all(row.context.begin(), row.context.end());
  all.insert(all.end(), row.generated.begin(), row.generated.end());
  return all;
}

// transformers gathers the scores of the row's tokens and scatters the penalised ones back: a
// token that occurs several times is penalised once.
void penalise_repeats(float* scores, std::vector<int32_t> tokens, float penalty) {
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  for (int32_t t : tokens) {
    float& s = scores[t];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

// Every token that follows an earlier occurrence of the row's last n - 1 tokens.
void ban_repeated_ngrams(float* scores, const std::vector<int32_t>& tokens, int64_t n) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  if (length + 1 < n) return;
  const auto suffix = tokens.end() - (n - 1);
  for (int64_t start = 0; start + n <= length; ++start) {
    const auto gram = tokens.begin() + start;
    if (std::equal(gram, gram + (n - 1), suffix)) scores[gram[n - 1]] = kForbidden;
  }
}
}  // namespace

void apply_step_rules(float* scores, int64_t vocab, const RowHistory& row, const StepRules& r, bool at_limit) {
  const int64_t step = static_cast<int64_t>(row.generated.size());
  if (r.read_history()) {
    const std::vector<int32_t> tokens = whole_row(row);
    for (int32_t t : tokens) QKV_CHECK(t >= 0 && t < vocab, "search: token " << t << " outside the vocabulary of " << vocab);
    if (r.constraints.repetition_penalty != 1.0f) penalise_repeats(scores, tokens, r.constraints.repetition_penalty);
    if (r.constraints.no_repeat_ngram_size > 0) ban_repeated_ngrams(scores, tokens, r.constraints.no_repeat_ngram_size);
  }
  for (int32_t id : r.never) scores[id] = kForbidden;
  if (step < r.min_new_tokens && !at_limit && r.eos_id >= 0) scores[r.eos_id] = kForbidden;
  if (step == 0 && r.forced_first >= 0) {
    std::fill(scores, scores + vocab, kForbidden);
    scores[r.forced_first] = 0.f;
  }
}

}  // namespace qkv::decoding
