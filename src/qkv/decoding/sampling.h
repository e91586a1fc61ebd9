// Choosing the next token from one row of logits: greedy (argmax) or sampling.
//
// Sampling follows Hugging Face's generate(do_sample=True) warpers, in its order:
//   1. temperature: logits / temperature (TemperatureLogitsWarper);
//   2. top-k: keep every token whose logit is >= the k-th largest logit, so tokens tied with the
//      k-th are all kept and more than k may survive (TopKLogitsWarper); k >= V keeps everything;
//   3. top-p: with the probabilities p = softmax(surviving logits) sorted ascending, drop a token
//      when its cumulative sum (itself and every smaller token) is <= 1 - top_p; the most probable
//      token is always kept (TopPLogitsWarper, min_tokens_to_keep = 1). So the kept set is the
//      most probable tokens down to and including the one whose mass makes the total reach top_p;
//      when the tokens above it already sum to exactly top_p it is dropped.
// then a token is drawn from softmax(the surviving logits). Differences from Hugging Face: qkv
// computes in double precision (HF in the logits' float32); equal probabilities in top-p are
// ranked lower id first (HF's order among ties is torch.sort's, which is unspecified); top-k is
// off by default (HF's generation config defaults to 50).
//
// Randomness: the draw for new token `step` of input line `line` is a counter-based uniform keyed
// by (seed, line, step), not a stream consumed in order, so a line's tokens depend only on the
// seed, its index and the model's logits: not on the thread count, the batch it is in, or which
// other lines finished first.
#pragma once
#include <cstdint>
#include <vector>

namespace qkv::decoding {

struct SamplingOptions {
  double temperature = 1.0;  // > 0 (and finite); 1 = unchanged
  int64_t top_k = 0;         // >= 0; 0 = off
  double top_p = 1.0;        // in (0, 1]; 1 = off
};

// Throws qkv::Error naming the CLI flag (--temperature, --top-k, --top-p) of the option that is
// out of its range.
void validate_sampling_options(const SamplingOptions& options);

// The distribution a token is drawn from, for one row of `vocab` logits: temperature, top-k, top-p
// as described above. Returns `vocab` probabilities summing to 1 (to rounding), exactly 0 for
// filtered tokens. A NaN logit, or no finite logit at all, is a qkv::Error. -inf logits are allowed
// (probability 0).
std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingOptions& options);

// Uniform in [0, 1) with 53 random bits, a pure function of (seed, line, step) built on
// mix64 (core/hash.h: SplitMix64's finaliser).
double sampling_uniform(uint64_t seed, uint64_t line, uint64_t step);

// Inverse CDF in id order: the first id whose cumulative probability exceeds u * (sum of probs).
// Ids of probability 0 are never chosen. `u` in [0, 1).
int32_t draw_token(const std::vector<double>& probs, double u);

// The draw for token `step` of line `line`: draw_token(sampling_distribution(...),
// sampling_uniform(seed, line, step)).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t seed,
                     uint64_t line, uint64_t step);

// Greedy choice: the id of the largest logit, the lowest id among ties. NaN logits are an error.
int32_t argmax_token(const float* logits, int64_t vocab);

}  // namespace qkv::decoding
