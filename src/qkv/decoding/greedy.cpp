#include "qkv/decoding/greedy.h"

#include <numeric>

#include "qkv/core/error.h"
#include "qkv/decoding/search_steps.h"

namespace qkv::decoding {
namespace {

// One row's token from its logits after the rules (applied to a copy when they change anything):
// the argmax, or a draw.
int32_t chosen_from_logits(const float* logits, int64_t V, const RowView& view, const GreedySettings& g, uint64_t key) {
  const auto step = static_cast<int64_t>(view.history.generated.size());
  std::vector<float> ruled;
  if (g.rules.active(step)) {
    ruled.assign(logits, logits + V);
    apply_step_rules(ruled.data(), V, view.history, g.rules, view.at_limit);
    logits = ruled.data();
  }
  return g.sample ? sample_token(logits, V, g.sampling, g.seed, key, static_cast<uint64_t>(step)) : argmax_token(logits, V);
}

// The sentences' hypotheses as they grow, and which sentence each decoder row holds.
class GreedyRows {
 public:
  GreedyRows(const std::vector<std::vector<int32_t>>& contexts, const std::vector<int64_t>& limits,
             const GreedySettings& g, const TokenChosen& on_token)
      : contexts_(contexts), limits_(limits), g_(g), on_token_(on_token), found_(contexts.size()), active_(contexts.size()) {
    std::iota(active_.begin(), active_.end(), int64_t{0});
  }

  const std::vector<int64_t>& active() const { return active_; }

  // What the rules read of row `row` at step t; at_limit: a seq2seq row must take EOS now.
  RowView view(int64_t row, int64_t t) const {
    const int64_t b = active_[static_cast<size_t>(row)];
    return RowView{{contexts_[b], found_[b].hypothesis.tokens}, g_.at_limit == BeamLimit::EndWithEos && t == limits_[b]};
  }

  // Row `row` takes `token` (with its log-probability after the rules) at step t; returns whether
  // the row goes on (not ended by EOS or by its limit).
  bool take(int64_t row, int64_t t, int32_t token, float log_prob) {
    const int64_t b = active_[static_cast<size_t>(row)];
    FoundHypothesis& f = found_[b];
    Hypothesis& h = f.hypothesis;
    if (g_.log_probs) h.log_prob += log_prob;
    const bool ends_with_eos = token == g_.rules.eos_id && (g_.stop_at_eos || view(row, t).at_limit);
    if (!ends_with_eos) {
      h.tokens.push_back(token);
      if (on_token_) on_token_(static_cast<size_t>(b), token);
    }
    h.finished = ends_with_eos;
    const bool cut = g_.at_limit == BeamLimit::Cut && static_cast<int64_t>(h.tokens.size()) >= limits_[b];
    if (!ends_with_eos && !cut) return true;
    f.step = t;
    f.row = row;
    return false;
  }

  // The rows that go on (`going_on`: old row and token each), placed in the next step's batch;
  // fills `next` with their tokens and returns the decoder's reordering.
  std::vector<int64_t> regroup(std::vector<Continuing> going_on, std::vector<int32_t>& next) {
    std::vector<int64_t> rows;
    next.clear();
    active_.clear();
    for (const Continuing& go : in_new_places(std::move(going_on))) {
      active_.push_back(go.sentence);
      rows.push_back(go.rows[0]);
      next.push_back(go.token[0]);
    }
    return rows;
  }

  std::vector<FoundHypothesis> results() {
    for (FoundHypothesis& f : found_) {
      Hypothesis& h = f.hypothesis;
      h.score = normalised(h.log_prob, h.tokens.size() + (h.finished ? 1 : 0), g_.length_penalty);
    }
    return std::move(found_);
  }

 private:
  const std::vector<std::vector<int32_t>>& contexts_;
  const std::vector<int64_t>& limits_;
  const GreedySettings& g_;
  const TokenChosen& on_token_;
  std::vector<FoundHypothesis> found_;  // per sentence
  std::vector<int64_t> active_;         // row i holds sentence active_[i]
};

}  // namespace

std::vector<uint64_t> keys_or_indices(const std::vector<uint64_t>& line_keys, size_t n) {
  if (!line_keys.empty()) return line_keys;
  std::vector<uint64_t> keys(n);
  std::iota(keys.begin(), keys.end(), uint64_t{0});
  return keys;
}

std::vector<FoundHypothesis> greedy_search_steps(DecoderSteps& decoder, const std::vector<std::vector<int32_t>>& contexts,
                                                 const std::vector<int64_t>& limits, const std::vector<uint64_t>& keys,
                                                 const GreedySettings& g, const TokenChosen& on_token) {
  QKV_CHECK(contexts.size() == limits.size() && contexts.size() == keys.size(),
            "greedy search: " << contexts.size() << " contexts, " << limits.size() << " limits, " << keys.size() << " keys");
  QKV_CHECK(g.stop_at_eos || g.at_limit == BeamLimit::Cut, "greedy search: ignoring EOS needs a cut at the limit");
  for (int64_t limit : limits) QKV_CHECK(limit >= 1, "greedy search: a limit of " << limit << " new tokens");
  if (contexts.empty()) return {};
  GreedyRows rows(contexts, limits, g, on_token);
  // The scores after the rules are the log-probabilities when the hypotheses' log_prob is wanted;
  // a repetition penalty or a draw reads the logits (as transformers' greedy search and sampling).
  const bool from_logits = !g.log_probs || g.sample || g.rules.constraints.repetition_penalty != 1.0f;
  // Greedy search without log-probabilities takes each row's highest logit after the rules: on a
  // GPU, where the rules read no history, that one comes back alone (top_step), not the row.
  const bool argmax_from_top = !g.log_probs && !g.sample && top_suffices(g.rules, 1);
  Tensor logits = decoder.first_logits();
  std::vector<int32_t> next;
  for (int64_t t = 0;; ++t) {
    const RowViewOf view_of = [&](int64_t row) { return rows.view(row, t); };
    // A draw or a penalty reads every logit of a row here; otherwise logits on a GPU stay there and
    // only each row's best token comes back (score_step, top_step).
    const bool top_on_device = argmax_from_top && logits.device().is_cuda();
    const bool host_logits = from_logits && !top_on_device;
    if (host_logits) logits = logits.to(Device::cpu());
    const Tensor raw = host_logits && g.log_probs ? logits.clone() : logits;
    StepScores s;
    if (g.log_probs) s = score_step(std::move(logits), g.rules, 1, view_of);
    if (top_on_device) s = top_step(std::move(logits), g.rules, 1, view_of, false);
    const int64_t V = raw.size(1);
    // The chosen token's log-probability after the rules: the row's best, or EOS at a limit, come
    // back from any device; another token (a draw) is read from the host's scores.
    const auto log_prob_of = [&](int64_t row, int32_t token) {
      const TopTokens& top = s.top[static_cast<size_t>(row)];
      if (!top.token.empty() && token == top.token[0]) return top.log_prob[0];
      if (token == g.rules.eos_id) return s.eos_log_prob[static_cast<size_t>(row)];
      return s.row(row)[token];
    };
    std::vector<Continuing> going_on;
    for (size_t i = 0; i < rows.active().size(); ++i) {
      const auto row = static_cast<int64_t>(i);
      const int64_t b = rows.active()[i];
      const RowView view = rows.view(row, t);
      int32_t token = g.rules.eos_id;  // at a seq2seq limit only EOS may follow, as in beam search
      if (!view.at_limit && host_logits) {
        token = chosen_from_logits(raw.f32() + row * V, V, view, g, keys[static_cast<size_t>(b)]);
      } else if (!view.at_limit && !s.top[i].token.empty()) {
        token = s.top[i].token[0];
      } else if (!view.at_limit && top_on_device) {
        token = 0;  // no finite logit: argmax_token's answer, as the host's logits give (continuous_generation too)
      }
      if (rows.take(row, t, token, g.log_probs ? log_prob_of(row, token) : 0.f)) going_on.push_back({b, row, {row}, {}, {token}});
    }
    if (going_on.empty()) break;
    const bool some_ended = going_on.size() < rows.active().size();
    const std::vector<int64_t> kept = rows.regroup(std::move(going_on), next);
    if (some_ended) decoder.reorder(kept);
    logits = decoder.next_logits(next);
  }
  return rows.results();
}

}  // namespace qkv::decoding
