#include "qkv/decoding/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "qkv/core/buffer_pool.h"
#include "qkv/decoding/greedy.h"
#include "qkv/decoding/search_steps.h"
#include "qkv/ops/ops.h"

namespace qkv::decoding {
namespace {

// The decoder over N rows (sentences x beam), with or without the key/value cache, as the searches
// see a decoder (DecoderSteps, beam.h). Sentences are
// encoded once (not once per beam); with the cache, the beams of a sentence share its encoder keys
// and values (DecoderState::rows_per_source), without it the encoder output is copied to each row. With `attention` it keeps the
// weights of every step and the reorderings between steps, so that any row's history can be traced
// back at the end (attention_of).
class StepDecoder : public DecoderSteps {
 public:
  // The model may be on a GPU: the ids go there, and the scores (and attention weights) come back
  // to the host, where the search runs.
  StepDecoder(const models::Transformer& model, const Tensor& host_src, int64_t rows_per_source, int64_t max_length,
              const SearchOptions& o)
      : model_(model),
        device_(model.device()),
        use_cache_(o.use_cache),
        attention_(o.attention),
        bos_rows_(static_cast<size_t>(host_src.size(0) * rows_per_source), static_cast<int32_t>(model.config().bos_id)) {
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

  // Every row starts from the decoder start (BOS).
  Tensor first_logits() override { return next_logits(bos_rows_); }

  // Appends tokens (one per row) and returns the next token's logits.
  Tensor next_logits(const std::vector<int32_t>& tokens) override {
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
    for (std::vector<Tensor>* weights : {&self_w, &cross_w})
      for (Tensor& w : *weights) w = w.to(Device::cpu());
    if (attention_) {
      if (backpointers_.size() < steps_.size()) backpointers_.emplace_back();  // no reorder: rows kept
      steps_.push_back({std::move(self_w), std::move(cross_w)});
    }
    return logits.contiguous();
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

  void reorder(const std::vector<int64_t>& rows) override {
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
  std::vector<int32_t> bos_rows_;         // the first step's tokens
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
  QKV_CHECK(o.min_length >= 0 && o.min_length <= kMaxLengthOffset,
            "--min-length: must be in [0, " << kMaxLengthOffset << "] (0 = off), got " << o.min_length);
  validate_token_constraints(o.constraints);
  if (!o.do_sample) return;
  QKV_CHECK(o.beam_size == 1 && o.n_best == 1, "--do-sample draws one translation a sentence: it takes --beam-size 1 and "
                                               "--num-hypotheses 1, got "
                                                   << o.beam_size << " and " << o.n_best);
  validate_sampling_options(o.sampling);
}

namespace {

// The rules every search of this model applies (constraints.h): pad and the decoder start are never
// chosen (a pad inside a hypothesis would be read as padding when the pair is scored), the minimum
// length, the forced first token (the options' or the config's), the repetition rules.
StepRules step_rules(const models::TransformerConfig& c, const SearchOptions& o) {
  StepRules r;
  r.constraints = o.constraints;
  r.never.push_back(static_cast<int32_t>(c.pad_id));
  // BART's decoder starts from its EOS (decoder_start_token_id 2): banning the start would ban EOS.
  if (c.bos_id != c.eos_id && c.bos_id != c.pad_id) r.never.push_back(static_cast<int32_t>(c.bos_id));
  r.eos_id = static_cast<int32_t>(c.eos_id);
  r.min_new_tokens = std::max<int64_t>(0, o.min_length - 1);  // the decoder start counts as one
  r.forced_first = o.forced_bos_id >= 0 ? o.forced_bos_id : static_cast<int32_t>(c.forced_bos_id);
  return r;
}

// Each sentence's limit of new tokens, and the largest.
std::vector<int64_t> output_limits(const models::Transformer& model, const std::vector<data::IdLine>& sources,
                                   const SearchOptions& o, int64_t& max_limit) {
  std::vector<int64_t> limit(sources.size());
  max_limit = 0;
  for (size_t b = 0; b < sources.size(); ++b) max_limit = std::max(max_limit, limit[b] = output_limit(model, sources[b].size(), o));
  return limit;
}

}  // namespace

// Beam search (beam.h) with the decoder as DecoderSteps: the rules read each sentence's decoder
// start and its tokens, and at the length limit every live beam ends with EOS.
std::vector<std::vector<Hypothesis>> beam_search(const models::Transformer& model,
                                                 const std::vector<data::IdLine>& sources, const SearchOptions& o) {
  check_sources(model, sources, o);
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const auto& c = model.config();
  const ScopedCacheLimit step_buffers(
      step_buffers_kept(static_cast<int64_t>(sources.size()) * o.beam_size, c.tgt_vocab_size));
  int64_t max_limit = 0;
  const std::vector<int64_t> limits = output_limits(model, sources, o, max_limit);
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), o.beam_size, max_limit + 1, o);
  // As fairseq and CTranslate2 end and keep hypotheses.
  BeamSettings settings{o.beam_size, o.n_best, o.length_penalty, BeamLimit::EndWithEos, false, step_rules(c, o)};
  const std::vector<std::vector<int32_t>> contexts(sources.size(), {static_cast<int32_t>(c.bos_id)});
  std::vector<std::vector<FoundHypothesis>> found = beam_search_steps(dec, contexts, limits, settings);
  std::vector<std::vector<Hypothesis>> out(sources.size());
  for (size_t b = 0; b < sources.size(); ++b)
    for (FoundHypothesis& f : found[b]) {
      out[b].push_back(std::move(f.hypothesis));
      if (o.attention)
        out[b].back().attention =
            dec.attention_of(f.row, f.step, static_cast<int64_t>(sources[b].size()), static_cast<int64_t>(b));
    }
  return out;
}

// Greedy search and sampling (greedy.h) with the decoder as DecoderSteps, as beam_search: the rules
// read each sentence's decoder start and its tokens, and at the length limit EOS follows.
std::vector<Hypothesis> greedy_search(const models::Transformer& model, const std::vector<data::IdLine>& sources,
                                      const SearchOptions& o, const std::vector<uint64_t>& line_keys) {
  SearchOptions greedy = o;
  greedy.beam_size = greedy.n_best = 1;
  check_sources(model, sources, greedy);
  QKV_CHECK(line_keys.empty() || line_keys.size() == sources.size(),
            "search: " << line_keys.size() << " line keys for " << sources.size() << " sources");
  if (sources.empty()) return {};
  NoGradGuard no_grad;
  const auto& c = model.config();
  const ScopedCacheLimit step_buffers(step_buffers_kept(static_cast<int64_t>(sources.size()), c.tgt_vocab_size));
  int64_t max_limit = 0;
  const std::vector<int64_t> limits = output_limits(model, sources, o, max_limit);
  const std::vector<uint64_t> keys = keys_or_indices(line_keys, sources.size());
  GreedySettings settings;
  settings.rules = step_rules(c, o);
  settings.at_limit = BeamLimit::EndWithEos;
  settings.sample = o.do_sample;
  settings.sampling = o.sampling;
  settings.seed = o.seed;
  settings.length_penalty = o.length_penalty;
  StepDecoder dec(model, data::pad_batch(sources, c.pad_id), 1, max_limit + 1, o);
  const std::vector<std::vector<int32_t>> contexts(sources.size(), {static_cast<int32_t>(c.bos_id)});
  std::vector<FoundHypothesis> found = greedy_search_steps(dec, contexts, limits, keys, settings);
  std::vector<Hypothesis> hyps;
  for (size_t b = 0; b < found.size(); ++b) {
    hyps.push_back(std::move(found[b].hypothesis));
    // Every greedy hypothesis ends with EOS (forced at the limit).
    if (o.attention)
      hyps.back().attention = dec.attention_of(found[b].row, found[b].step, static_cast<int64_t>(sources[b].size()),
                                               static_cast<int64_t>(b));
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
    const std::vector<uint64_t> keys(batch.begin(), batch.end());
    std::vector<Hypothesis> found = greedy_search(model, rows, o, keys);
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
