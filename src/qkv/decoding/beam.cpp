#include "qkv/decoding/beam.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "qkv/core/error.h"
#include "qkv/decoding/search_steps.h"
#include "qkv/ops/ops.h"

namespace qkv::decoding {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The `count` most likely tokens of one row of log-probabilities, best first, ties to the smaller
// id (the order of a sort by (log-prob, -id)); tokens at -inf are never chosen.
void top_tokens(const float* row, int64_t V, int64_t count, TopTokens& top) {
  top.log_prob.clear();
  top.token.clear();
  float worst = -std::numeric_limits<float>::infinity();  // what a token must beat to get in
  const auto consider = [&](int64_t v) {
    const float x = row[v];
    if (!(x > worst)) return;  // an equal one has a smaller id: it stays ahead
    size_t at = top.log_prob.size();
    while (at > 0 && top.log_prob[at - 1] < x) --at;
    top.log_prob.insert(top.log_prob.begin() + static_cast<std::ptrdiff_t>(at), x);
    top.token.insert(top.token.begin() + static_cast<std::ptrdiff_t>(at), static_cast<int32_t>(v));
    if (static_cast<int64_t>(top.log_prob.size()) > count) {
      top.log_prob.pop_back();
      top.token.pop_back();
    }
    if (static_cast<int64_t>(top.log_prob.size()) == count) worst = top.log_prob.back();
  };
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {  // most blocks of 8 hold no candidate: one comparison skips them
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + v), _mm256_set1_ps(worst), _CMP_GT_OQ));
    for (; mask != 0; mask &= mask - 1) consider(v + __builtin_ctz(static_cast<unsigned>(mask)));
  }
  for (; v < V; ++v) consider(v);
}

}  // namespace

StepScores score_step(Tensor logits, const StepRules& rules, int64_t count, const RowViewOf& view_of) {
  if (logits.device().is_cuda()) {
    if (top_suffices(rules, count)) return top_step(std::move(logits), rules, count, view_of, true);
    logits = logits.to(Device::cpu());  // the rules read each row's tokens: they run here
  }
  StepScores s{logits.contiguous(), {}, {}};
  const int64_t N = s.log_probs.size(0), V = s.log_probs.size(1);
  s.top.resize(static_cast<size_t>(N));
  s.eos_log_prob.assign(static_cast<size_t>(N), -std::numeric_limits<float>::infinity());
  const Tensor lse = ops::log_softmax_rows_inplace(s.log_probs);
  float* data = s.log_probs.f32();
  std::string error;
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t i = 0; i < N; ++i) {
    try {
      QKV_CHECK(!std::isnan(lse.f32()[i]), "search: the model's logits contain NaN");
      const RowView view = view_of(i);
      apply_step_rules(data + i * V, V, view.history, rules, view.at_limit);
      top_tokens(data + i * V, V, count, s.top[static_cast<size_t>(i)]);
      if (rules.eos_id >= 0) s.eos_log_prob[static_cast<size_t>(i)] = data[i * V + rules.eos_id];
    } catch (const Error& e) {
#pragma omp critical
      error = e.what();
    }
  }
  QKV_CHECK(error.empty(), error);
  return s;
}

std::vector<Continuing> in_new_places(std::vector<Continuing> going_on) {
  const size_t count = going_on.size();
  std::vector<Continuing> placed(count);
  std::vector<char> taken(count, 0);
  std::vector<Continuing*> movers;
  for (Continuing& go : going_on) {
    if (static_cast<size_t>(go.block) < count) {
      taken[static_cast<size_t>(go.block)] = 1;
      placed[static_cast<size_t>(go.block)] = std::move(go);
    } else {
      movers.push_back(&go);
    }
  }
  size_t free_place = 0;
  for (Continuing* go : movers) {
    while (taken[free_place]) ++free_place;
    taken[free_place] = 1;
    placed[free_place] = std::move(*go);
  }
  return placed;
}

double normalised(double log_prob, size_t length, float alpha) {
  return alpha == 0.f ? log_prob : log_prob / std::pow(static_cast<double>(length), alpha);
}

namespace {

// A candidate continuation of one sentence: beam `beam` extended by `token`, with the sum of
// log-probabilities it would have.
struct Candidate {
  double log_prob;
  int64_t beam;
  int32_t token;
};

// The `count` best continuations of a sentence's live beams (rows first_row .. + K), best first,
// ties to the smaller (beam, token), the order of a sort over every (beam, token) pair. A row's own
// top `count` tokens are enough: cum + log_prob is monotonic in log_prob within a row.
std::vector<Candidate> best_candidates(const StepScores& s, const std::vector<double>& cum, int64_t first_row,
                                       int64_t K, int64_t count) {
  std::vector<Candidate> cand;
  for (int64_t k = 0; k < K; ++k) {
    if (cum[first_row + k] == kNegInf) continue;
    const TopTokens& top = s.top[static_cast<size_t>(first_row + k)];
    for (size_t i = 0; i < top.token.size(); ++i) cand.push_back({cum[first_row + k] + top.log_prob[i], k, top.token[i]});
  }
  const size_t take = std::min<size_t>(cand.size(), static_cast<size_t>(count));
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(take), cand.end(),
                    [](const Candidate& x, const Candidate& y) {
                      if (x.log_prob != y.log_prob) return x.log_prob > y.log_prob;
                      return x.beam != y.beam ? x.beam < y.beam : x.token < y.token;
                    });
  cand.resize(take);
  return cand;
}

// The search's state between steps: row j K + k holds beam k of sentence active[j].
class Beams {
 public:
  Beams(const std::vector<std::vector<int32_t>>& contexts, const std::vector<int64_t>& limits, const BeamSettings& s)
      : contexts_(contexts), limits_(limits), s_(s), K_(s.beam_size), finished_(contexts.size()) {
    const int64_t B = static_cast<int64_t>(contexts.size());
    active_.resize(static_cast<size_t>(B));
    std::iota(active_.begin(), active_.end(), int64_t{0});
    // Only beam 0 is live at the start (the others are copies of it with -inf score) so the first
    // step does not pick K copies of one token.
    cum_.assign(static_cast<size_t>(B * K_), kNegInf);
    for (int64_t b = 0; b < B; ++b) cum_[b * K_] = 0;
    tokens_.resize(static_cast<size_t>(B * K_));
  }

  bool done() const { return active_.empty(); }

  // Chooses step t's continuations from the logits of every row; fills `next` (the tokens to feed)
  // and returns the reordering of rows for the decoder (empty: every sentence is done).
  std::vector<int64_t> advance(int64_t t, Tensor logits, std::vector<int32_t>& next) {
    const auto view_of = [&](int64_t row) {
      const int64_t b = active_[static_cast<size_t>(row / K_)];
      return RowView{{contexts_[b], tokens_[row]}, at_eos_limit(t, b)};
    };
    const StepScores s = score_step(std::move(logits), s_.rules, 2 * K_, view_of);
    std::vector<Continuing> going_on;
    for (size_t j = 0; j < active_.size(); ++j) {
      const int64_t b = active_[j], first = static_cast<int64_t>(j) * K_;
      if (at_eos_limit(t, b)) {  // every live beam ends here with EOS
        for (int64_t k = 0; k < K_; ++k)
          if (cum_[first + k] != kNegInf)
            finish(b, tokens_[first + k], cum_[first + k] + s.eos_log_prob[static_cast<size_t>(first + k)], true, t,
                 first + k);
        continue;
      }
      Continuing go = continuations(s, b, static_cast<int64_t>(j), t);
      if (go.rows.empty()) continue;  // done: it leaves the batch
      if (s_.at_limit == BeamLimit::Cut && t + 1 >= limits_[b]) {  // the beams hold `limit` tokens: they end
        for (size_t k = 0; k < go.rows.size(); ++k) {
          if (go.cum[k] == kNegInf) continue;
          std::vector<int32_t> tokens = tokens_[go.rows[k]];
          tokens.push_back(go.token[k]);
          finish(b, tokens, go.cum[k], false, t, go.rows[k]);
        }
        continue;
      }
      going_on.push_back(std::move(go));
    }
    return regroup(std::move(going_on), next);
  }

  // Each sentence's n_best hypotheses, best first.
  std::vector<std::vector<FoundHypothesis>> results() {
    for (auto& f : finished_) {
      std::stable_sort(f.begin(), f.end(), [](const FoundHypothesis& x, const FoundHypothesis& y) {
        return x.hypothesis.score > y.hypothesis.score;
      });
      if (static_cast<int64_t>(f.size()) > s_.n_best) f.resize(static_cast<size_t>(s_.n_best));
    }
    return std::move(finished_);
  }

 private:
  bool at_eos_limit(int64_t t, int64_t b) const { return s_.at_limit == BeamLimit::EndWithEos && t == limits_[b]; }

  void finish(int64_t b, const std::vector<int32_t>& tokens, double log_prob, bool with_eos, int64_t step, int64_t row) {
    Hypothesis h{tokens, log_prob, normalised(log_prob, tokens.size() + (with_eos ? 1 : 0), s_.length_penalty), with_eos, {}};
    finished_[b].push_back({std::move(h), step, row});
  }

  // A hypothesis that ends with EOS joins sentence b's finished ones while they are fewer than K;
  // after that (several may end in the step that completes the K) see better_replaces_worst.
  void offer(int64_t b, const std::vector<int32_t>& tokens, double log_prob, int64_t step, int64_t row) {
    std::vector<FoundHypothesis>& f = finished_[b];
    if (static_cast<int64_t>(f.size()) < K_) return finish(b, tokens, log_prob, true, step, row);
    if (!s_.better_replaces_worst) return;
    const auto worst = std::min_element(f.begin(), f.end(), [](const FoundHypothesis& x, const FoundHypothesis& y) {
      return x.hypothesis.score < y.hypothesis.score;
    });
    const double score = normalised(log_prob, tokens.size() + 1, s_.length_penalty);
    if (score <= worst->hypothesis.score) return;
    f.erase(worst);
    finish(b, tokens, log_prob, true, step, row);
  }

  // Sentence b's next K beams (rows j K ..); finishes the hypotheses that end with EOS. No rows:
  // the sentence is done (K hypotheses finished, or nothing left to continue).
  Continuing continuations(const StepScores& s, int64_t b, int64_t j, int64_t t) {
    const int64_t first = j * K_;
    Continuing go{b, j, {}, {}, {}};
    const std::vector<Candidate> cand = best_candidates(s, cum_, first, K_, 2 * K_);
    for (size_t i = 0; i < cand.size() && static_cast<int64_t>(go.rows.size()) < K_; ++i) {
      const int64_t row = first + cand[i].beam;
      if (cand[i].token == s_.rules.eos_id) {
        if (static_cast<int64_t>(i) < K_) offer(b, tokens_[row], cand[i].log_prob, t, row);
        continue;
      }
      go.rows.push_back(row);
      go.cum.push_back(cand[i].log_prob);
      go.token.push_back(cand[i].token);
    }
    if (static_cast<int64_t>(finished_[b].size()) >= K_ || go.rows.empty()) return {b, j, {}, {}, {}};
    while (static_cast<int64_t>(go.rows.size()) < K_) {  // fewer than K continuations (tiny vocabularies)
      go.rows.push_back(first);
      go.cum.push_back(kNegInf);
      go.token.push_back(s_.rules.eos_id);
    }
    return go;
  }

  // The sentences that go on, placed in the next batch; returns the decoder's reordering.
  std::vector<int64_t> regroup(std::vector<Continuing> going_on, std::vector<int32_t>& next) {
    std::vector<int64_t> rows;
    std::vector<double> new_cum;
    std::vector<std::vector<int32_t>> new_tokens;
    next.clear();
    active_.clear();
    for (const Continuing& go : in_new_places(std::move(going_on))) {
      active_.push_back(go.sentence);
      for (size_t k = 0; k < go.rows.size(); ++k) {
        rows.push_back(go.rows[k]);
        new_cum.push_back(go.cum[k]);
        new_tokens.push_back(go.cum[k] == kNegInf ? std::vector<int32_t>{} : tokens_[go.rows[k]]);
        if (go.cum[k] != kNegInf) new_tokens.back().push_back(go.token[k]);
        next.push_back(go.token[k]);
      }
    }
    cum_ = std::move(new_cum);
    tokens_ = std::move(new_tokens);
    return rows;
  }

  const std::vector<std::vector<int32_t>>& contexts_;
  const std::vector<int64_t>& limits_;
  const BeamSettings& s_;
  const int64_t K_;
  std::vector<int64_t> active_;
  std::vector<double> cum_;                   // per row: its log-probability so far (-inf: dead)
  std::vector<std::vector<int32_t>> tokens_;  // per row: its new tokens
  std::vector<std::vector<FoundHypothesis>> finished_;
};

}  // namespace

std::vector<std::vector<FoundHypothesis>> beam_search_steps(DecoderSteps& decoder,
                                                            const std::vector<std::vector<int32_t>>& contexts,
                                                            const std::vector<int64_t>& limits,
                                                            const BeamSettings& settings) {
  QKV_CHECK(contexts.size() == limits.size(), "beam search: " << contexts.size() << " contexts, " << limits.size() << " limits");
  QKV_CHECK(settings.beam_size >= 1 && settings.n_best >= 1 && settings.n_best <= settings.beam_size,
            "beam search: n_best " << settings.n_best << " must be in [1, beam_size " << settings.beam_size << "]");
  for (int64_t limit : limits) QKV_CHECK(limit >= 1, "beam search: a limit of " << limit << " new tokens");
  if (contexts.empty()) return {};
  Beams beams(contexts, limits, settings);
  Tensor logits = decoder.first_logits();
  std::vector<int32_t> next;
  for (int64_t t = 0;; ++t) {
    const std::vector<int64_t> rows = beams.advance(t, std::move(logits), next);
    if (beams.done()) break;
    decoder.reorder(rows);
    logits = decoder.next_logits(next);
  }
  return beams.results();
}

}  // namespace qkv::decoding
