// Translation search over a Transformer: greedy, sampling and beam search, batched over sentences.
// Greedy search and sampling (greedy.h) and beam search (beam.h) are those of every family, the
// token rules those of constraints.h and the draws those of sampling.h, which a causal LM's
// generation (generate.h) uses too.
//
// All run the decoder incrementally: the encoder output is projected to cross-attention keys and
// values once, and self-attention keys/values of decoded positions are cached (use_cache = false
// re-runs the whole decoder on the prefix each step instead; it exists to test the cache).
//
// Scores: a hypothesis' log_prob is the sum of log p(token) over its tokens and its EOS, exactly
// what `qkv score` computes for the pair (source, [BOS] hyp [EOS]) (with a repetition penalty or
// n-gram rule: the scores after them, as transformers ranks beams); its score for ranking is
// log_prob / length^length_penalty with length = tokens + 1 (fairseq's normalisation).
#pragma once
#include <functional>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/decoding/attention.h"
#include "qkv/decoding/beam.h"
#include "qkv/decoding/constraints.h"
#include "qkv/decoding/sampling.h"
#include "qkv/models/transformer.h"

namespace qkv::decoding {

// Bounds of the options (and kMaxBeamSize, kMaxLengthPenalty: beam.h).
inline constexpr float kMaxLengthRatio = 1000.f;
inline constexpr int64_t kMaxLengthOffset = int64_t{1} << 20;

struct SearchOptions {
  int beam_size = 4;            // 1 = greedy; in [1, min(kMaxBeamSize, target vocabulary size)]
  int n_best = 1;               // hypotheses returned per sentence, in [1, beam_size]
  float length_penalty = 1.0f;  // alpha in log_prob / length^alpha, in [0, kMaxLengthPenalty]
  float max_length_ratio = 2.0f;   // output limit: ratio * source length + offset, ratio in
  int64_t max_length_offset = 10;  // [0, kMaxLengthRatio], offset in [0, kMaxLengthOffset];
                                   // capped by the model's max_seq_length - 1
  bool use_cache = true;
  // transformers' min_length: EOS is refused while the decoder's tokens (its start token counted,
  // as transformers counts it) are fewer, so a hypothesis has at least min_length - 1 tokens before
  // its EOS, unless the length limit comes first. In [0, kMaxLengthOffset]; 0 = off.
  int64_t min_length = 0;
  TokenConstraints constraints;  // repetition_penalty, no_repeat_ngram_size (constraints.h)
  // Sampling instead of the argmax (beam_size and n_best 1): sampling.h's draws, sentence i of the
  // input keyed by (seed, i), so a sentence's output does not depend on its batch.
  bool do_sample = false;
  SamplingOptions sampling;
  uint64_t seed = 0;
  // >= 0: the first target token, with log-probability 0, instead of the model config's
  // forced_bos_id (a multilingual model's target language, chosen per call); -1: the config's.
  int32_t forced_bos_id = -1;
  // Keep each returned hypothesis' attention weights (Hypothesis::attention; see attention.h).
  // Off by default: then nothing is kept or computed. On, the search keeps every step's weights of
  // every row until the end (about layers x heads x steps x (steps / 2 + source length) floats per
  // row), so translate big batches without it.
  bool attention = false;
  // (The products run in the model's compute type: models::Model::set_compute_type.)
  // Self-attention key/value storage reused by each search (nn::KVCacheStorage), for a caller that
  // searches many batches one after another (api::Translator keeps one per call). Null: each search
  // allocates its own. Cached decoding only; one search at a time.
  std::shared_ptr<nn::KVCacheStorage> kv_storage;
};

// Throws qkv::Error naming the option that is out of its range (see SearchOptions). Both searches
// call it; it is public so callers can check options before loading a model.
void validate_search_options(const SearchOptions& options, int64_t tgt_vocab_size);

// Results per sentence, best first (n_best each). Sources must fit max_seq_length.
std::vector<std::vector<Hypothesis>> beam_search(const models::Transformer& model,
                                                 const std::vector<data::IdLine>& sources, const SearchOptions& options);
// Greedy decoding: the argmax token each step (beam_search with beam_size 1 gives the same tokens,
// unless a repetition penalty applies: see constraints.h), or with do_sample a draw. `line_keys`
// (one per source; empty: 0, 1, ...) key each sentence's random stream.
std::vector<Hypothesis> greedy_search(const models::Transformer& model, const std::vector<data::IdLine>& sources,
                                      const SearchOptions& options, const std::vector<uint64_t>& line_keys = {});

// Called after each batch of search_in_batches / search_each with the sentences done so far and in
// all (empty sources are not counted).
using BatchProgress = std::function<void(int64_t done, int64_t total)>;
// Any number of sentences, `batch_size` at a time: sorted by length so that a batch's sentences
// end at about the same step, greedy (or sampling) when beam_size and n_best are 1, beam search
// otherwise. Sampled sentences are keyed by their index in `sources`.
// Several batches share one key/value storage (unless the options bring
// their own). Results in input order; an empty source gets no hypothesis.
std::vector<std::vector<Hypothesis>> search_in_batches(const models::Transformer& model,
                                                       const std::vector<data::IdLine>& sources,
                                                       const SearchOptions& options, int64_t batch_size,
                                                       const BatchProgress& after_batch = {});

// Called once per source by search_each: its index in `sources` and its hypotheses, best first
// (none for an empty source), handed over as soon as its batch is done.
using SentenceFound = std::function<void(size_t index, std::vector<Hypothesis>&& hypotheses)>;
// search_in_batches for a caller that uses results as they come (writes them, frees them): the
// sources are taken in consecutive windows of `sort_window` sentences (0: one window of all),
// each sorted by length into batches, so every source of a window is found before any of the next
// one. A smaller window gives the first results sooner, a larger one less padding. The sources of
// a window come in the order its batches finish, its empty ones first; after_batch follows the
// batch's on_found calls.
void search_each(const models::Transformer& model, const std::vector<data::IdLine>& sources, const SearchOptions& options,
                 int64_t batch_size, int64_t sort_window, const SentenceFound& on_found,
                 const BatchProgress& after_batch = {});

}  // namespace qkv::decoding
