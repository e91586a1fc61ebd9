#include "qkv/decoding/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace qkv::decoding {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The decoder over N rows (sentences x beam), with or without the key/value cache. With
// `attention` it keeps the weights of every step and the reorderings between steps, so that any
// row's history can be traced back at the end (attention_of).
class StepDecoder {
 public:
  StepDecoder(const models::Transformer& model, const Tensor& src, int64_t rows_per_source, int64_t max_length,
              bool use_cache, bool attention = false)
      : model_(model), use_cache_(use_cache), attention_(attention), rows_per_source_(rows_per_source) {
    std::vector<int64_t> expand;
    for (int64_t b = 0; b < src.size(0); ++b)
      for (int64_t k = 0; k < rows_per_source; ++k) expand.push_back(b);
    src_ = gather(src, expand);  // (N, S)
    const models::Masks masks = model.generate_mask(src_, src_);
    enc_ = model.encode(src_, masks.src, attention_ ? &encoder_weights_ : nullptr);
    if (use_cache_) state_ = model.start_decoding(enc_, src_, max_length);
    prefix_.assign(static_cast<size_t>(src_.size(0)), std::vector<int32_t>{});
  }

  // Appends tokens (one per row) and returns log-probabilities of the next token, (N, V) row-major.
  std::vector<float> next_log_probs(const std::vector<int32_t>& tokens) {
    const int64_t N = static_cast<int64_t>(tokens.size()), V = model_.config().tgt_vocab_size;
    for (int64_t i = 0; i < N; ++i) prefix_[i].push_back(tokens[i]);
    Tensor logits;
    std::vector<Tensor> self_w, cross_w;
    std::vector<Tensor>* self_out = attention_ ? &self_w : nullptr;
    std::vector<Tensor>* cross_out = attention_ ? &cross_w : nullptr;
    if (use_cache_) {
      logits = model_.decode_step(Tensor::from_ids(Dims{N}, tokens), state_, self_out, cross_out).value();
    } else {  // the whole prefix again; keep the last position
      const int64_t T = static_cast<int64_t>(prefix_[0].size());
      std::vector<int32_t> flat;
      for (const auto& p : prefix_) flat.insert(flat.end(), p.begin(), p.end());
      const models::Masks masks = model_.generate_mask(src_, Tensor::from_ids(Dims{N, T}, flat));
      const Tensor all = model_.decode(Tensor::from_ids(Dims{N, T}, flat), enc_, masks, self_out, cross_out).value();
      logits = all.narrow(1, T - 1, 1).contiguous().reshape(Dims{N, V});  // (N, T, V) -> the last position
      for (Tensor& w : self_w) w = w.narrow(2, T - 1, 1).contiguous();
      for (Tensor& w : cross_w) w = w.narrow(2, T - 1, 1).contiguous();
    }
    if (attention_) {
      if (backpointers_.size() < steps_.size()) backpointers_.emplace_back();  // no reorder: rows kept
      steps_.push_back({std::move(self_w), std::move(cross_w)});
    }
    std::vector<float> lp(logits.to_vector());
    for (int64_t i = 0; i < N; ++i) {  // log-softmax per row, in double for the normaliser
      float* row = lp.data() + i * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t v = 0; v < V; ++v) row[v] -= lse;
      // Pad and BOS are never produced: a pad inside a hypothesis would be read as padding when
      // the pair is scored. The others keep their true log-probabilities (not renormalised).
      row[model_.config().pad_id] = -std::numeric_limits<float>::infinity();
      row[model_.config().bos_id] = -std::numeric_limits<float>::infinity();
    }
    return lp;
  }

  // The weights of the sequence that is row `row` at step `last` (queries 0..last), of a source of
  // `src_len` tokens from sentence `sentence`: traced back through the reorderings.
  AttentionWeights attention_of(int64_t row, int64_t last, int64_t src_len, int64_t sentence) const {
    AttentionWeights a;
    const int64_t T = last + 1, layers = static_cast<int64_t>(encoder_weights_.size());
    const int64_t H = model_.config().num_heads;
    for (const Tensor& enc : encoder_weights_) {  // (N, H, S_pad, S_pad): every row of a sentence is alike
      const int64_t S_pad = enc.size(2);
      Tensor e = Tensor::empty(Dims{H, src_len, src_len});
      const float* from = enc.f32() + sentence * rows_per_source_ * H * S_pad * S_pad;
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

  void reorder(const std::vector<int64_t>& rows) {
    if (attention_) backpointers_.push_back(rows);
    std::vector<std::vector<int32_t>> prefix;
    for (int64_t r : rows) prefix.push_back(prefix_[r]);
    prefix_ = std::move(prefix);
    if (use_cache_) {
      model_.reorder(state_, rows);
    } else {
      src_ = gather(src_, rows);
      enc_ = Var(gather(enc_.value(), rows));
    }
  }

 private:
  static Tensor gather(const Tensor& in, const std::vector<int64_t>& rows) {
    Dims shape = in.shape();
    shape[0] = static_cast<int64_t>(rows.size());
    Tensor out = Tensor::empty(shape, in.dtype());
    for (size_t i = 0; i < rows.size(); ++i) out.slice0(i, i + 1).copy_from(in.slice0(rows[i], rows[i] + 1));
    return out;
  }

  const models::Transformer& model_;
  bool use_cache_, attention_;
  int64_t rows_per_source_;
  std::vector<Tensor> encoder_weights_;  // per layer (N, H, S, S)
  struct StepWeights {
    std::vector<Tensor> self, cross;  // per layer (N, H, 1, t + 1) and (N, H, 1, S) at step t
  };
  std::vector<StepWeights> steps_;
  std::vector<std::vector<int64_t>> backpointers_;  // the reordering after step t (empty: none)
  Tensor src_;
  Var enc_;
  models::DecoderState state_;
  std::vector<std::vector<int32_t>> prefix_;
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
}

std::vector<std::vector<Hypothesis>> beam_search(const models::Transformer& model,
                                                 const std::vector<data::IdLine>& sources, const SearchOptions& o) {
  check_sources(model, sources, o);
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const auto& c = model.config();
  const int64_t B = static_cast<int64_t>(sources.size()), K = o.beam_size, V = c.tgt_vocab_size;
  std::vector<int64_t> limit(B);
  int64_t max_limit = 0;
  for (int64_t b = 0; b < B; ++b) max_limit = std::max(max_limit, limit[b] = output_limit(model, sources[b].size(), o));
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), K, max_limit + 1, o.use_cache, o.attention);

  // Row b*K + k holds beam k of sentence b. Only beam 0 is live at the start (the others are
  // copies of it with -inf score) so the first step does not pick K copies of one token.
  std::vector<double> cum(B * K, kNegInf);
  for (int64_t b = 0; b < B; ++b) cum[b * K] = 0;
  std::vector<std::vector<int32_t>> tokens(B * K);
  std::vector<std::vector<Hypothesis>> finished(B);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ended_at(B);  // (step, row) of each finished one
  std::vector<char> done(B, 0);
  std::vector<int32_t> next(B * K, c.bos_id);

  for (int64_t t = 0; t <= max_limit; ++t) {
    const std::vector<float> lp = dec.next_log_probs(next);
    std::vector<int64_t> rows(B * K);
    std::vector<double> new_cum(B * K, kNegInf);
    std::vector<std::vector<int32_t>> new_tokens(B * K);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < K; ++k) rows[b * K + k] = b * K + k;
      if (done[b]) continue;
      if (t == limit[b]) {  // length limit: every live beam ends here with EOS
        for (int64_t k = 0; k < K; ++k) {
          const double base = cum[b * K + k];
          if (base == kNegInf) continue;
          const double lpe = base + lp[(b * K + k) * V + c.eos_id];
          const std::vector<int32_t>& prev = tokens[b * K + k];
          finished[b].push_back({prev, lpe, normalised(lpe, prev.size() + 1, o.length_penalty), true, {}});
          ended_at[b].emplace_back(t, b * K + k);
        }
        done[b] = 1;
        continue;
      }
      // Top 2K candidates over (beam, token): at most K of them are EOS, so K stay alive.
      std::vector<std::pair<double, int64_t>> cand;
      cand.reserve(K * V);
      for (int64_t k = 0; k < K; ++k) {
        if (cum[b * K + k] == kNegInf) continue;
        const float* row = lp.data() + (b * K + k) * V;
        for (int64_t v = 0; v < V; ++v) cand.emplace_back(cum[b * K + k] + row[v], k * V + v);
      }
      const size_t take = std::min<size_t>(cand.size(), 2 * K);
      std::partial_sort(cand.begin(), cand.begin() + take, cand.end(),
                        [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      int64_t alive = 0;
      for (size_t i = 0; i < take && alive < K; ++i) {
        const int64_t k = cand[i].second / V;
        const int32_t v = static_cast<int32_t>(cand[i].second % V);
        const std::vector<int32_t>& prev = tokens[b * K + k];
        if (v == c.eos_id) {
          if (static_cast<int64_t>(finished[b].size()) < K) {  // EOS among the top candidates: a finished hypothesis
            finished[b].push_back({prev, cand[i].first, normalised(cand[i].first, prev.size() + 1, o.length_penalty), true, {}});
            ended_at[b].emplace_back(t, b * K + k);
          }
          continue;
        }
        rows[b * K + alive] = b * K + k;
        new_cum[b * K + alive] = cand[i].first;
        new_tokens[b * K + alive] = prev;
        new_tokens[b * K + alive].push_back(v);
        next[b * K + alive] = v;
        ++alive;
      }
      if (static_cast<int64_t>(finished[b].size()) >= K || alive == 0) done[b] = 1;
    }
    if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
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
  check_sources(model, sources, SearchOptions{1, 1, o.length_penalty, o.max_length_ratio, o.max_length_offset, o.use_cache, o.attention});
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const auto& c = model.config();
  const int64_t B = static_cast<int64_t>(sources.size()), V = c.tgt_vocab_size;
  std::vector<int64_t> limit(B);
  int64_t max_limit = 0;
  for (int64_t b = 0; b < B; ++b) max_limit = std::max(max_limit, limit[b] = output_limit(model, sources[b].size(), o));
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), 1, max_limit + 1, o.use_cache, o.attention);
  std::vector<Hypothesis> hyps(B);
  std::vector<int32_t> next(B, c.bos_id);
  int64_t remaining = B;
  for (int64_t t = 0; t <= max_limit && remaining > 0; ++t) {
    const std::vector<float> lp = dec.next_log_probs(next);
    for (int64_t b = 0; b < B; ++b) {
      Hypothesis& h = hyps[b];
      if (h.finished || t > limit[b]) continue;
      const float* row = lp.data() + b * V;
      // At the limit only EOS may follow, as in beam search.
      const int32_t v = t == limit[b] ? c.eos_id : static_cast<int32_t>(std::max_element(row, row + V) - row);
      h.log_prob += row[v];
      if (v == c.eos_id) {
        h.finished = true;
        --remaining;
      } else {
        h.tokens.push_back(v);
      }
      next[b] = v;
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    Hypothesis& h = hyps[b];
    h.score = normalised(h.log_prob, h.tokens.size() + 1, o.length_penalty);
    // Row b chose EOS at step tokens.size() (every greedy hypothesis ends with EOS, forced at the limit).
    if (o.attention)
      h.attention = dec.attention_of(b, static_cast<int64_t>(h.tokens.size()), static_cast<int64_t>(sources[b].size()), b);
  }
  return hyps;
}

}  // namespace qkv::decoding
