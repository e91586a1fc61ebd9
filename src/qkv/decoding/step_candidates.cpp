// A search step's candidates found on the logits' own device (on a GPU, all that comes back of a
// step), and the rules that read no history applied to them on the host.
#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/decoding/search_steps.h"
#include "qkv/ops/ops.h"

namespace qkv::decoding {

int64_t candidates_needed(const StepRules& rules, int64_t count) {
  return count + static_cast<int64_t>(rules.never.size()) + (rules.eos_id >= 0 ? 1 : 0);
}

bool top_suffices(const StepRules& rules, int64_t count) {
  return !rules.read_history() && candidates_needed(rules, count) <= ops::max_top_of_rows();
}

StepCandidates step_candidates(Tensor logits, int64_t width, int32_t eos_id, bool normalise) {
  // The log-sum-exp is NaN exactly where a row holds a NaN: the host's check, without the row. Raw
  // logits keep their own values for the top (argmax_token's order, bit for bit), so the
  // normaliser then comes from a copy.
  Tensor scores = normalise ? logits.contiguous() : logits.clone();
  const Tensor lse = ops::log_softmax_rows_inplace(scores).to(Device::cpu());
  const Tensor& ranked = normalise ? scores : logits;
  const auto [values, ids] = ops::top_of_rows(ranked, width);
  StepCandidates c;
  c.width = width;
  c.values = values.to(Device::cpu());
  c.ids = ids.to(Device::cpu());
  if (eos_id >= 0) c.eos = ranked.narrow(1, eos_id, 1).to(Device::cpu()).contiguous();  // a column: strided on the CPU
  for (int64_t i = 0; i < lse.numel(); ++i)
    QKV_CHECK(!std::isnan(lse.f32()[i]), "search: the model's logits contain NaN (row " << i << ")");
  return c;
}

// Removing ids from a row's sorted candidates leaves the order of the rest, so the best `count` left
// are what apply_step_rules and a top over the whole row would give.
void top_from_candidates(const StepCandidates& c, int64_t i, const StepRules& rules, const RowView& view,
                         int64_t count, TopTokens& top, float& eos_score) {
  QKV_CHECK(!rules.read_history(), "search: rules that read a row's tokens need its whole scores");
  top.log_prob.clear();
  top.token.clear();
  eos_score = -std::numeric_limits<float>::infinity();
  const auto step = static_cast<int64_t>(view.history.generated.size());
  if (step == 0 && rules.forced_first >= 0) {  // apply_step_rules: every id -inf but this one, 0
    top = {{0.f}, {rules.forced_first}};
    if (rules.forced_first == rules.eos_id) eos_score = 0.f;
    return;
  }
  const auto never = [&](int32_t id) {
    return std::find(rules.never.begin(), rules.never.end(), id) != rules.never.end();
  };
  const bool ban_eos = rules.eos_id >= 0 && (never(rules.eos_id) || (step < rules.min_new_tokens && !view.at_limit));
  if (rules.eos_id >= 0 && !ban_eos) eos_score = c.eos.f32()[i];
  const int32_t* ids = c.ids.i32() + i * c.width;
  const float* values = c.values.f32() + i * c.width;
  for (int64_t j = 0; j < c.width && static_cast<int64_t>(top.token.size()) < count; ++j) {
    if (ids[j] < 0) break;  // no more candidates above -inf
    if ((ids[j] == rules.eos_id && ban_eos) || never(ids[j])) continue;
    top.log_prob.push_back(values[j]);
    top.token.push_back(ids[j]);
  }
}

StepScores top_step(Tensor logits, const StepRules& rules, int64_t count, const RowViewOf& view_of, bool normalise) {
  QKV_CHECK(top_suffices(rules, count), "search: " << count << " tokens a row under these rules need the whole scores");
  const int64_t N = logits.size(0);
  const StepCandidates c = step_candidates(std::move(logits), candidates_needed(rules, count), rules.eos_id, normalise);
  StepScores s;
  s.top.resize(static_cast<size_t>(N));
  s.eos_log_prob.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const auto r = static_cast<size_t>(i);
    top_from_candidates(c, i, rules, view_of(i), count, s.top[r], s.eos_log_prob[r]);
  }
  return s;
}

}  // namespace qkv::decoding
