// Text generation with a decoder-only model (models::CausalLM), batched over prompts.
//
// Each batch runs the prompts at once (prefill, left-padded to the longest) and then one token per
// step through the key/value cache, in the searches every family shares (greedy.h, beam.h); a row
// that finishes (EOS or its token budget) is dropped from the state with reorder(), so finished
// sequences cost nothing. The next token is the argmax (greedy) or a draw (decoding/sampling.h)
// keyed by (seed, the row's line key, the new token's index): a line's output depends on the seed,
// its key and the model only, not on the thread count or on which other prompts share its batch.
//
// The context: a prompt and its new tokens never exceed the model's max_seq_length.
//   - A prompt that leaves no room for one new token (length >= max_seq_length) is refused, or with
//     LongPrompt::TruncateLeft cut from the left.
//   - TruncateLeft cuts every prompt that would not leave room for max_new_tokens, keeping its last
//     max(1, max_seq_length - max_new_tokens) tokens (Hugging Face pipelines' "hole" strategy), so
//     a truncated prompt still gets all its new tokens when max_new_tokens < max_seq_length.
//   - Otherwise a prompt of L tokens gets at most max_seq_length - L new tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/decoding/attention.h"
#include "qkv/decoding/beam.h"
#include "qkv/decoding/constraints.h"
#include "qkv/decoding/sampling.h"
#include "qkv/models/causal_lm.h"

namespace qkv::decoding {

enum class LongPrompt { Refuse, TruncateLeft };

struct GenerateOptions {
  int64_t max_new_tokens = 64;  // >= 0; capped per prompt by the context (see above)
  bool sample = false;          // false: greedy (argmax, lowest id among ties)
  SamplingOptions sampling;     // with sample: temperature, top-k, top-p
  uint64_t seed = 0;            // with sample: the random stream's key
  bool stop_at_eos = true;      // a row ends at EOS (not included in the output); false: EOS is a token
  // transformers' min_new_tokens: EOS is refused before this many new tokens. >= 0; 0 = off.
  int64_t min_new_tokens = 0;
  TokenConstraints constraints;  // repetition_penalty, no_repeat_ngram_size
  // Beam search (not with sample, stop_at_eos or attention weights): beam_size K in [1, the vocabulary
  // size and kMaxBeamSize], num_hypotheses <= K kept per prompt, ranked by log_prob /
  // length^length_penalty (length: new tokens, EOS included when there is one).
  int beam_size = 1;
  int num_hypotheses = 1;
  float length_penalty = 1.0f;
  LongPrompt long_prompt = LongPrompt::Refuse;
  // (The products run in the model's compute type: models::Model::set_compute_type.)
  // For a caller that generates many batches (api::Generator, per call): key/value storage the
  // batches share (nn::KVCacheStorage). Null: generate makes it once per call. One generation at a
  // time.
  std::shared_ptr<nn::KVCacheStorage> kv_storage;
};

// A prompt fitted to the context: the tokens the model reads and how many it may add.
struct FittedPrompt {
  std::vector<int32_t> tokens;
  int64_t new_tokens = 0;
  bool truncated = false;
};
// Applies the rules above to one (non-empty) prompt. Refused (LongPrompt::Refuse, length >=
// max_seq_length): a qkv::Error saying how long the prompt is and what the context holds.
FittedPrompt fit_prompt(const std::vector<int32_t>& prompt, int64_t max_seq_length, const GenerateOptions& options);

// Called once per produced token of row `row` (an index into the prompts), in order, as soon as it
// is chosen; not for the EOS that ends a row.
using TokenCallback = std::function<void(size_t row, int32_t token)>;

// Throws qkv::Error naming the CLI flag of an option out of its range or not allowed with another.
void validate_generate_options(const GenerateOptions& options, int64_t vocab_size);

// The new tokens of every prompt (the prompt not repeated, EOS not included). Prompts must be
// non-empty (start one with the BOS id to generate from nothing) and hold ids in [0, vocab size);
// `line_keys` (one per prompt; empty: 0, 1, ...) key each row's random stream: give the input line
// index so a line draws the same tokens whatever batch it is in. Validates `options` (sampling
// errors name the CLI flag). Runs under NoGradGuard; the model should be in eval mode.
// `attention`, when given, receives one AttentionWeights per prompt (decoder_self: the
// self-attention over the tokens the model read; see attention.h); null, the default, keeps and
// computes nothing extra.
std::vector<std::vector<int32_t>> generate(const models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const std::vector<uint64_t>& line_keys, const GenerateOptions& options,
                                           const TokenCallback& on_token = {},
                                           std::vector<AttentionWeights>* attention = nullptr);

// Beam search over every prompt (options.beam_size rows each, any beam_size >= 1): each prompt's
// options.num_hypotheses best hypotheses, best first (tokens: the new ones, EOS not included).
std::vector<std::vector<Hypothesis>> generate_hypotheses(const models::CausalLM& model,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const GenerateOptions& options);

}  // namespace qkv::decoding
