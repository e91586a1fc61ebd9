// The pieces the searches (beam.h, search.h) share: one step's scores (logits turned into
// log-probabilities, the step rules of constraints.h applied, each row's most likely tokens), and
// the placing of the sentences that go on in the next step's smaller batch.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/decoding/constraints.h"

namespace qkv::decoding {

// A row's most likely next tokens: log-probability and token id, best first.
struct TopTokens {
  std::vector<float> log_prob;
  std::vector<int32_t> token;
};

// Each row's top tokens and its EOS log-probability after the rules, and where the logits were on
// the host, all the log-probabilities (N, V) row-major, after the rules.
struct StepScores {
  Tensor log_probs;  // undefined where the logits stayed on a GPU (only the top came back)
  std::vector<TopTokens> top;
  std::vector<float> eos_log_prob;  // -inf where there is no EOS or the rules forbid it
  const float* row(int64_t i) const {
    QKV_CHECK(log_probs.defined() && !log_probs.device().is_cuda(), "search: a step's full scores are on the host only");
    return log_probs.f32() + i * log_probs.size(1);
  }
};

// What the rules need of row i at this step.
struct RowView {
  RowHistory history;
  bool at_limit = false;  // the row must end here: the minimum length gives way
};
using RowViewOf = std::function<RowView(int64_t row)>;

// Turns logits (N, V) into log-probabilities in place (not normalised again after the rules, as
// transformers' beam search), applies the rules to each row and finds its `count` most likely
// tokens, best first, ties to the smaller id. Tokens at -inf are never chosen, so fewer than
// `count` may come back. NaN logits are a qkv::Error. Logits on a GPU stay there when the rules
// read no history: the GPU finds each row's best tokens (ops::top_of_rows, a few more than `count`
// for the ids the rules forbid), and only those come back.
StepScores score_step(Tensor logits, const StepRules& rules, int64_t count, const RowViewOf& view_of);

// A step's candidates from the logits' own device (on a GPU, all that comes back of a step): each
// row's `width` best scores and their ids (ops::top_of_rows: best first, ties to the smaller id, id
// -1 past the last finite one) and its EOS score; log-probabilities when `normalise` (the logits
// become them in place), else the logits themselves, ranked as argmax_token ranks them. Host
// tensors: values and ids (N, width), eos (N, 1), undefined without an EOS id. NaN logits are a
// qkv::Error.
struct StepCandidates {
  Tensor values, ids, eos;
  int64_t width = 0;
};
StepCandidates step_candidates(Tensor logits, int64_t width, int32_t eos_id, bool normalise);

// The candidates a row needs for its `count` best tokens once the rules drop theirs (each `never`
// id and EOS), and whether candidates suffice at all: the rules read no history and the width is
// within ops::max_top_of_rows().
int64_t candidates_needed(const StepRules& rules, int64_t count);
bool top_suffices(const StepRules& rules, int64_t count);

// Row i's `count` best tokens from its candidates after rules that read no history (what
// apply_step_rules and a top over the whole row give), and its EOS score after them (-inf where
// they forbid EOS or there is none).
void top_from_candidates(const StepCandidates& c, int64_t i, const StepRules& rules, const RowView& view,
                         int64_t count, TopTokens& top, float& eos_score);

// score_step's path for logits on a GPU (top_suffices must hold), on any device: each row's top
// after the rules from its candidates; `log_probs` stays undefined. Without `normalise` the scores
// are the logits (greedy search's argmax, with no log-probabilities asked).
StepScores top_step(Tensor logits, const StepRules& rules, int64_t count, const RowViewOf& view_of, bool normalise);

// A sentence that goes on to the next step: its rows (K of them, in beam search) continue the old
// rows `rows` with these scores and tokens. `block` is where its rows were: j in rows [j K, j K + K).
struct Continuing {
  int64_t sentence, block;
  std::vector<int64_t> rows;
  std::vector<double> cum;
  std::vector<int32_t> token;
};

// The sentences that go on, in their order in the next step's batch. A sentence keeps its place
// when that place is still inside the smaller batch; the others move into the places finished
// sentences left. Compacting in order would instead shift every sentence after a finished one, and
// each shift copies its rows' key/value caches (see Transformer::reorder).
std::vector<Continuing> in_new_places(std::vector<Continuing> going_on);

}  // namespace qkv::decoding
