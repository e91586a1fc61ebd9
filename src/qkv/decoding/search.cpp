#include "qkv/decoding/search.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "qkv/core/buffer_pool.h"
#include "qkv/ops/ops.h"

namespace qkv::decoding {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A row's most likely next tokens: log-probability and token id, best first.
struct TopTokens {
  std::vector<float> log_prob;
  std::vector<int32_t> token;
};

// Turns one row of logits into log-probabilities, in place, and finds its `count` most likely
// tokens, best first, ties to the smaller id (the order of a sort by (log-prob, -id)). Pad and BOS
// get -inf and are never chosen: a pad inside a hypothesis would be read as padding when the pair
// is scored. Tokens at -inf are never chosen either, so fewer than `count` may come back.
// `row` holds log-probabilities already (ops::log_softmax_rows_inplace), `lse` their normaliser.
void log_probs_and_top(float* row, float lse, int64_t V, const models::TransformerConfig& c, int64_t count,
                       TopTokens& top) {
  QKV_CHECK(!std::isnan(lse), "search: the model's logits contain NaN");
  row[c.pad_id] = -std::numeric_limits<float>::infinity();
  // BART's decoder starts from its EOS (decoder_start_token_id 2): banning the start would ban EOS.
  if (c.bos_id != c.eos_id) row[c.bos_id] = -std::numeric_limits<float>::infinity();
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

// One decoding step's scores: log-probabilities (N, V) row-major (logits turned in place) and each
// row's top tokens.
struct StepScores {
  Tensor log_probs;
  std::vector<TopTokens> top;
  const float* row(int64_t i) const { return log_probs.f32() + i * log_probs.size(1); }
};

StepScores score_step(Tensor logits, const models::TransformerConfig& c, int64_t count) {
  StepScores s{logits.contiguous(), {}};
  const int64_t N = s.log_probs.size(0), V = s.log_probs.size(1);
  s.top.resize(static_cast<size_t>(N));
  const Tensor lse = ops::log_softmax_rows_inplace(s.log_probs);
  float* data = s.log_probs.f32();
  std::string error;
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t i = 0; i < N; ++i) {
    try {
      log_probs_and_top(data + i * V, lse.f32()[i], V, c, count, s.top[static_cast<size_t>(i)]);
    } catch (const Error& e) {
#pragma omp critical
      error = e.what();
    }
  }
  QKV_CHECK(error.empty(), error);
  return s;
}

// The config's forced_bos_id as the first step's only choice in every row, with log-probability 0
// (transformers' ForcedBOSTokenLogitsProcessor: every other score -inf, the forced one 0).
void force_first_token(StepScores& s, int32_t token) {
  const int64_t N = s.log_probs.size(0), V = s.log_probs.size(1);
  float* data = s.log_probs.f32();
  std::fill(data, data + N * V, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < N; ++i) {
    data[i * V + token] = 0.f;
    s.top[static_cast<size_t>(i)] = TopTokens{{0.f}, {token}};
  }
}

// The decoder over N rows (sentences x beam), with or without the key/value cache. Sentences are
// encoded once (not once per beam); with the cache, the beams of a sentence share its encoder keys
// and values (DecoderState::rows_per_source), without it the encoder output is copied to each row. With `attention` it keeps the
// weights of every step and the reorderings between steps, so that any row's history can be traced
// back at the end (attention_of).
class StepDecoder {
 public:
  // The model may be on a GPU: the ids go there, and the scores (and attention weights) come back
  // to the host, where the search runs.
  StepDecoder(const models::Transformer& model, const Tensor& host_src, int64_t rows_per_source, int64_t max_length,
              const SearchOptions& o)
      : model_(model),
        device_(model.device()),
        use_cache_(o.use_cache),
        attention_(o.attention),
        forced_bos_id_(o.forced_bos_id >= 0 ? o.forced_bos_id : model.config().forced_bos_id) {
    const Tensor src = host_src.to(device_);
    const Var enc = model.encode(src, model.generate_mask(src, src).src, attention_ ? &encoder_weights_ : nullptr);
    for (Tensor& w : encoder_weights_) w = w.to(Device::cpu());
    if (use_cache_) {
      state_ = model.start_decoding(enc, src, max_length, rows_per_source, o.kv_storage.get());
    } else {  // each sentence's rows get their own copy of its source and encoder output
      std::vector<int64_t> expand;
      for (int64_t b = 0; b < src.size(0); ++b)
        for (int64_t k = 0; k < rows_per_source; ++k) expand.push_back(b);
      src_ = ops::gather_rows(src, expand);  // (N, S)
      enc_ = Var(ops::gather_rows(enc.value(), expand));
      prefix_.assign(expand.size(), std::vector<int32_t>{});
    }
  }

  // Appends tokens (one per row) and returns the next token's scores with `count` top tokens a row.
  StepScores next_scores(const std::vector<int32_t>& tokens, int64_t count) {
    const int64_t N = static_cast<int64_t>(tokens.size()), V = model_.config().tgt_vocab_size;
    Tensor logits;
    std::vector<Tensor> self_w, cross_w;
    std::vector<Tensor>* self_out = attention_ ? &self_w : nullptr;
    std::vector<Tensor>* cross_out = attention_ ? &cross_w : nullptr;
    if (use_cache_) {
      logits = model_.decode_step(Tensor::from_ids(Dims{N}, tokens).to(device_), state_, self_out, cross_out).value();
    } else {  // the whole prefix again; keep the last position
      for (int64_t i = 0; i < N; ++i) prefix_[i].push_back(tokens[i]);
      const int64_t T = static_cast<int64_t>(prefix_[0].size());
      std::vector<int32_t> flat;
      for (const auto& p : prefix_) flat.insert(flat.end(), p.begin(), p.end());
      const Tensor prefix = Tensor::from_ids(Dims{N, T}, flat).to(device_);
      const models::Masks masks = model_.generate_mask(src_, prefix);
      const Tensor all = model_.decode(prefix, enc_, masks, self_out, cross_out).value();
      logits = all.narrow(1, T - 1, 1).contiguous().reshape(Dims{N, V});  // (N, T, V) -> the last position
      for (Tensor& w : self_w) w = w.narrow(2, T - 1, 1).contiguous();
      for (Tensor& w : cross_w) w = w.narrow(2, T - 1, 1).contiguous();
    }
    logits = logits.to(Device::cpu());
    for (std::vector<Tensor>* weights : {&self_w, &cross_w})
      for (Tensor& w : *weights) w = w.to(Device::cpu());
    if (attention_) {
      if (backpointers_.size() < steps_.size()) backpointers_.emplace_back();  // no reorder: rows kept
      steps_.push_back({std::move(self_w), std::move(cross_w)});
    }
    StepScores scores = score_step(std::move(logits), model_.config(), count);
    if (steps_done_++ == 0 && forced_bos_id_ >= 0) force_first_token(scores, forced_bos_id_);
    return scores;
  }

  // The weights of the sequence that is row `row` at step `last` (queries 0..last), of a source of
  // `src_len` tokens from sentence `sentence`: traced back through the reorderings.
  AttentionWeights attention_of(int64_t row, int64_t last, int64_t src_len, int64_t sentence) const {
    AttentionWeights a;
    const int64_t T = last + 1, layers = static_cast<int64_t>(encoder_weights_.size());
    const int64_t H = model_.config().num_heads;
    for (const Tensor& enc : encoder_weights_) {  // (B, H, S_pad, S_pad), one row per sentence
      const int64_t S_pad = enc.size(2);
      Tensor e = Tensor::empty(Dims{H, src_len, src_len});
      const float* from = enc.f32() + sentence * H * S_pad * S_pad;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t q = 0; q < src_len; ++q)
          std::copy_n(from + (h * S_pad + q) * S_pad, src_len, e.f32() + (h * src_len + q) * src_len);
      a.encoder_self.push_back(std::move(e));
    }
    for (int64_t l = 0; l < layers; ++l) {
      a.decoder_self.push_back(Tensor::zeros(Dims{H, T, T}));
      a.cross.push_back(Tensor::empty(Dims{H, T, src_len}));
    }
    for (int64_t t = last; t >= 0; --t) {
      const StepWeights& s = steps_[static_cast<size_t>(t)];
      for (int64_t l = 0; l < layers; ++l) {
        const Tensor& sw = s.self[static_cast<size_t>(l)];   // (N, H, 1, t + 1)
        const Tensor& cw = s.cross[static_cast<size_t>(l)];  // (N, H, 1, S_pad)
        const int64_t S_pad = cw.size(3);
        for (int64_t h = 0; h < H; ++h) {
          std::copy_n(sw.f32() + (row * H + h) * (t + 1), t + 1, a.decoder_self[l].f32() + (h * T + t) * T);
          std::copy_n(cw.f32() + (row * H + h) * S_pad, src_len, a.cross[l].f32() + (h * T + t) * src_len);
        }
      }
      if (t > 0 && !backpointers_[static_cast<size_t>(t - 1)].empty()) row = backpointers_[static_cast<size_t>(t - 1)][row];
    }
    return a;
  }

  // Row i continues old row rows[i]; rows may be fewer than before (finished sentences dropped).
  void reorder(const std::vector<int64_t>& rows) {
    if (attention_) backpointers_.push_back(rows);
    if (use_cache_) {
      model_.reorder(state_, rows);
    } else {
      std::vector<std::vector<int32_t>> prefix;
      for (int64_t r : rows) prefix.push_back(prefix_[r]);
      prefix_ = std::move(prefix);
      src_ = ops::gather_rows(src_, rows);
      enc_ = Var(ops::gather_rows(enc_.value(), rows));
    }
  }

 private:
  const models::Transformer& model_;
  Device device_;  // the model's
  bool use_cache_, attention_;
  int32_t forced_bos_id_;   // the options' or the config's; -1: none
  int64_t steps_done_ = 0;  // next_scores calls so far: the first is where forced_bos_id applies
  std::vector<Tensor> encoder_weights_;  // per layer (B, H, S, S)
  struct StepWeights {
    std::vector<Tensor> self, cross;  // per layer (N, H, 1, t + 1) and (N, H, 1, S) at step t
  };
  std::vector<StepWeights> steps_;
  std::vector<std::vector<int64_t>> backpointers_;  // the reordering after step t (empty: none)
  Tensor src_;                                      // without the cache: sources and encoder
  Var enc_;                                         // output expanded to the rows, and each
  std::vector<std::vector<int32_t>> prefix_;        // row's tokens so far
  models::DecoderState state_;
};

int64_t output_limit(const models::Transformer& model, size_t src_len, const SearchOptions& o) {
  const int64_t by_ratio = static_cast<int64_t>(std::ceil(o.max_length_ratio * static_cast<double>(src_len))) + o.max_length_offset;
  // Positions hold BOS + tokens; the last position predicts EOS.
  return std::max<int64_t>(1, std::min<int64_t>(by_ratio, model.config().max_seq_length - 1));
}

double normalised(double log_prob, size_t length, float alpha) {
  return alpha == 0.f ? log_prob : log_prob / std::pow(static_cast<double>(length), alpha);
}

void check_sources(const models::Transformer& model, const std::vector<data::IdLine>& sources, const SearchOptions& o) {
  validate_search_options(o, model.config().tgt_vocab_size);
  for (size_t i = 0; i < sources.size(); ++i) {
    QKV_CHECK(!sources[i].empty(), "search: source " << i + 1 << " is empty");
    QKV_CHECK(static_cast<int64_t>(sources[i].size()) <= model.config().max_seq_length,
              "search: source " << i + 1 << " has " << sources[i].size() << " tokens, more than max_seq_length "
                                << model.config().max_seq_length);
  }
}

}  // namespace

void validate_search_options(const SearchOptions& o, int64_t tgt_vocab_size) {
  const int64_t max_beam = std::min<int64_t>(kMaxBeamSize, tgt_vocab_size);
  QKV_CHECK(o.beam_size >= 1 && o.beam_size <= max_beam,
            "search: beam_size " << o.beam_size << " must be in [1, " << max_beam << "] (at most " << kMaxBeamSize
                                 << " and the target vocabulary size " << tgt_vocab_size << ")");
  QKV_CHECK(o.n_best >= 1 && o.n_best <= o.beam_size,
            "search: n_best " << o.n_best << " must be in [1, beam_size " << o.beam_size << "]");
  QKV_CHECK(std::isfinite(o.length_penalty) && o.length_penalty >= 0.f && o.length_penalty <= kMaxLengthPenalty,
            "search: length_penalty " << o.length_penalty << " must be in [0, " << kMaxLengthPenalty << "]");
  QKV_CHECK(std::isfinite(o.max_length_ratio) && o.max_length_ratio >= 0.f && o.max_length_ratio <= kMaxLengthRatio,
            "search: max_length_ratio " << o.max_length_ratio << " must be in [0, " << kMaxLengthRatio << "]");
  QKV_CHECK(o.max_length_offset >= 0 && o.max_length_offset <= kMaxLengthOffset,
            "search: max_length_offset " << o.max_length_offset << " must be in [0, " << kMaxLengthOffset << "]");
  QKV_CHECK(o.forced_bos_id >= -1 && o.forced_bos_id < tgt_vocab_size,
            "search: forced_bos_id " << o.forced_bos_id
                                     << " must be -1 (the model's) or an id of the target vocabulary of " << tgt_vocab_size);
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

}  // namespace

// Beam search as fairseq and CTranslate2 do it. Each step takes the 2K best continuations of a
// sentence's K beams; an EOS among the first K of them finishes a hypothesis, an EOS ranked lower is
// dropped (it was not good enough to be a beam), and the first K others are the next beams. A
// sentence is done once K hypotheses have finished, or at its length limit, where every live beam
// ends with EOS. Done sentences leave the batch, so the decoder only runs on sentences in progress.
std::vector<std::vector<Hypothesis>> beam_search(const models::Transformer& model,
                                                 const std::vector<data::IdLine>& sources, const SearchOptions& o) {
  check_sources(model, sources, o);
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(kStepBuffersKept);
  const auto& c = model.config();
  const int64_t B = static_cast<int64_t>(sources.size()), K = o.beam_size;
  std::vector<int64_t> limit(B);
  int64_t max_limit = 0;
  for (int64_t b = 0; b < B; ++b) max_limit = std::max(max_limit, limit[b] = output_limit(model, sources[b].size(), o));
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), K, max_limit + 1, o);

  // Row j*K + k holds beam k of sentence active[j]. Only beam 0 is live at the start (the others
  // are copies of it with -inf score) so the first step does not pick K copies of one token.
  std::vector<int64_t> active(B);
  std::iota(active.begin(), active.end(), int64_t{0});
  std::vector<double> cum(B * K, kNegInf);
  for (int64_t b = 0; b < B; ++b) cum[b * K] = 0;
  std::vector<std::vector<int32_t>> tokens(B * K);
  std::vector<std::vector<Hypothesis>> finished(B);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ended_at(B);  // (step, row) of each finished one
  std::vector<int32_t> next(B * K, c.bos_id);

  const auto finish = [&](int64_t b, const std::vector<int32_t>& prefix, double log_prob, int64_t step, int64_t row) {
    finished[b].push_back({prefix, log_prob, normalised(log_prob, prefix.size() + 1, o.length_penalty), true, {}});
    ended_at[b].emplace_back(step, row);
  };
  for (int64_t t = 0; t <= max_limit && !active.empty(); ++t) {
    const StepScores s = dec.next_scores(next, 2 * K);
    std::vector<Continuing> going_on;
    for (size_t j = 0; j < active.size(); ++j) {
      const int64_t b = active[j], first = static_cast<int64_t>(j) * K;
      if (t == limit[b]) {  // length limit: every live beam ends here with EOS
        for (int64_t k = 0; k < K; ++k)
          if (cum[first + k] != kNegInf) finish(b, tokens[first + k], cum[first + k] + s.row(first + k)[c.eos_id], t, first + k);
        continue;
      }
      Continuing go{b, static_cast<int64_t>(j), {}, {}, {}};
      const std::vector<Candidate> cand = best_candidates(s, cum, first, K, 2 * K);
      for (size_t i = 0; i < cand.size() && static_cast<int64_t>(go.rows.size()) < K; ++i) {
        const int64_t row = first + cand[i].beam;
        if (cand[i].token == c.eos_id) {
          if (static_cast<int64_t>(i) < K && static_cast<int64_t>(finished[b].size()) < K) finish(b, tokens[row], cand[i].log_prob, t, row);
          continue;
        }
        go.rows.push_back(row);
        go.cum.push_back(cand[i].log_prob);
        go.token.push_back(cand[i].token);
      }
      if (static_cast<int64_t>(finished[b].size()) >= K || go.rows.empty()) continue;  // done: it leaves the batch
      while (static_cast<int64_t>(go.rows.size()) < K) {  // fewer than K continuations (tiny vocabularies)
        go.rows.push_back(first);
        go.cum.push_back(kNegInf);
        go.token.push_back(c.eos_id);
      }
      going_on.push_back(std::move(go));
    }
    if (going_on.empty()) break;
    std::vector<int64_t> rows;
    std::vector<double> new_cum;
    std::vector<std::vector<int32_t>> new_tokens;
    next.clear();
    active.clear();
    for (const Continuing& go : in_new_places(std::move(going_on))) {
      active.push_back(go.sentence);
      for (size_t k = 0; k < go.rows.size(); ++k) {
        rows.push_back(go.rows[k]);
        new_cum.push_back(go.cum[k]);
        new_tokens.push_back(go.cum[k] == kNegInf ? std::vector<int32_t>{} : tokens[go.rows[k]]);
        if (go.cum[k] != kNegInf) new_tokens.back().push_back(go.token[k]);
        next.push_back(go.token[k]);
      }
    }
    cum = std::move(new_cum);
    tokens = std::move(new_tokens);
    dec.reorder(rows);
  }
  std::vector<std::vector<Hypothesis>> out(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& f = finished[b];
    std::vector<size_t> order(f.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return f[x].score > f[y].score; });
    if (static_cast<int64_t>(order.size()) > o.n_best) order.resize(o.n_best);
    for (size_t i : order) {
      out[b].push_back(f[i]);
      if (o.attention) {
        const auto [step, row] = ended_at[b][i];
        out[b].back().attention = dec.attention_of(row, step, static_cast<int64_t>(sources[b].size()), b);
      }
    }
  }
  return out;
}

std::vector<Hypothesis> greedy_search(const models::Transformer& model, const std::vector<data::IdLine>& sources,
                                      const SearchOptions& o) {
  SearchOptions greedy = o;
  greedy.beam_size = greedy.n_best = 1;
  check_sources(model, sources, greedy);
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(kStepBuffersKept);
  const auto& c = model.config();
  const int64_t B = static_cast<int64_t>(sources.size());
  std::vector<int64_t> limit(B);
  int64_t max_limit = 0;
  for (int64_t b = 0; b < B; ++b) max_limit = std::max(max_limit, limit[b] = output_limit(model, sources[b].size(), o));
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), 1, max_limit + 1, o);
  std::vector<Hypothesis> hyps(B);
  std::vector<int64_t> active(B);  // row i decodes sentence active[i]
  std::iota(active.begin(), active.end(), int64_t{0});
  std::vector<int64_t> ended_row(B), ended_step(B);
  std::vector<int32_t> next(B, c.bos_id);
  for (int64_t t = 0; t <= max_limit && !active.empty(); ++t) {
    const StepScores s = dec.next_scores(next, 1);
    std::vector<Continuing> going_on;
    for (size_t i = 0; i < active.size(); ++i) {
      const int64_t b = active[i], row = static_cast<int64_t>(i);
      Hypothesis& h = hyps[b];
      const TopTokens& top = s.top[i];
      // At the limit only EOS may follow, as in beam search.
      const int32_t v = t == limit[b] || top.token.empty() ? c.eos_id : top.token[0];
      h.log_prob += s.row(row)[v];
      if (v == c.eos_id) {
        h.finished = true;
        ended_row[b] = row;
        ended_step[b] = t;
        continue;
      }
      h.tokens.push_back(v);
      going_on.push_back({b, row, {row}, {}, {v}});
    }
    if (going_on.empty()) break;
    const bool some_ended = going_on.size() < active.size();
    std::vector<int64_t> rows;
    next.clear();
    active.clear();
    for (const Continuing& go : in_new_places(std::move(going_on))) {
      active.push_back(go.sentence);
      rows.push_back(go.rows[0]);
      next.push_back(go.token[0]);
    }
    if (some_ended) dec.reorder(rows);
  }
  for (int64_t b = 0; b < B; ++b) {
    Hypothesis& h = hyps[b];
    h.score = normalised(h.log_prob, h.tokens.size() + 1, o.length_penalty);
    // Every greedy hypothesis ends with EOS (forced at the limit).
    if (o.attention)
      h.attention = dec.attention_of(ended_row[b], ended_step[b], static_cast<int64_t>(sources[b].size()), b);
  }
  return hyps;
}

namespace {
// The indices in [first, last) of the non-empty sources, shortest first (stable: equal lengths keep
// input order).
std::vector<size_t> by_length(const std::vector<data::IdLine>& sources, size_t first, size_t last) {
  std::vector<size_t> order;
  for (size_t i = first; i < last; ++i)
    if (!sources[i].empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() < sources[b].size(); });
  return order;
}

// Searches the sources named by `batch` together and hands each one's hypotheses to on_found.
void search_batch(const models::Transformer& model, const std::vector<data::IdLine>& sources,
                  const std::vector<size_t>& batch, const SearchOptions& o, const SentenceFound& on_found) {
  std::vector<data::IdLine> rows;
  rows.reserve(batch.size());
  for (size_t i : batch) rows.push_back(sources[i]);
  if (o.beam_size == 1 && o.n_best == 1) {
    std::vector<Hypothesis> found = greedy_search(model, rows, o);
    for (size_t k = 0; k < batch.size(); ++k) {
      std::vector<Hypothesis> one;
      one.push_back(std::move(found[k]));
      on_found(batch[k], std::move(one));
    }
    return;
  }
  std::vector<std::vector<Hypothesis>> found = beam_search(model, rows, o);
  for (size_t k = 0; k < batch.size(); ++k) on_found(batch[k], std::move(found[k]));
}
}  // namespace

void search_each(const models::Transformer& model, const std::vector<data::IdLine>& sources, const SearchOptions& options,
                 int64_t batch_size, int64_t sort_window, const SentenceFound& on_found, const BatchProgress& after_batch) {
  QKV_CHECK(batch_size >= 1, "batch_size must be at least 1, got " << batch_size);
  QKV_CHECK(sort_window >= 0, "sort_window must be at least 0, got " << sort_window);
  validate_search_options(options, model.config().tgt_vocab_size);
  const auto per_batch = static_cast<size_t>(batch_size);
  const size_t window = sort_window > 0 ? static_cast<size_t>(sort_window) : std::max<size_t>(sources.size(), 1);
  const auto total = static_cast<int64_t>(
      std::count_if(sources.begin(), sources.end(), [](const data::IdLine& s) { return !s.empty(); }));
  SearchOptions o = options;
  // The batches write their keys and values into the same storage (faulted in once, not once per
  // batch).
  if (o.use_cache && total > batch_size && !o.kv_storage) o.kv_storage = std::make_shared<nn::KVCacheStorage>();
  int64_t done = 0;
  for (size_t first = 0; first < sources.size(); first += window) {
    const size_t last = std::min(sources.size(), first + window);
    for (size_t i = first; i < last; ++i)
      if (sources[i].empty()) on_found(i, {});
    const std::vector<size_t> order = by_length(sources, first, last);
    for (size_t begin = 0; begin < order.size(); begin += per_batch) {
      const size_t end = std::min(order.size(), begin + per_batch);
      search_batch(model, sources, std::vector<size_t>(order.begin() + begin, order.begin() + end), o, on_found);
      done += static_cast<int64_t>(end - begin);
      if (after_batch) after_batch(done, total);
    }
  }
}

std::vector<std::vector<Hypothesis>> search_in_batches(const models::Transformer& model,
                                                       const std::vector<data::IdLine>& sources,
                                                       const SearchOptions& options, int64_t batch_size,
                                                       const BatchProgress& after_batch) {
  std::vector<std::vector<Hypothesis>> results(sources.size());
  search_each(model, sources, options, batch_size, 0,
              [&](size_t i, std::vector<Hypothesis>&& found) { results[i] = std::move(found); }, after_batch);
  return results;
}

}  // namespace qkv::decoding
