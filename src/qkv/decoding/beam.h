// Beam search written once for every family, over a small decoder interface (DecoderSteps, after
// CTranslate2's decoding.h): a seq2seq model's decoder (search.h) and a causal LM (generate.h) each
// implement it, and both searches run beam_search_steps below.
//
// Each step takes the 2K best continuations of a sentence's K beams; an EOS among the first K of
// them finishes a hypothesis, an EOS ranked lower is dropped (it was not good enough to be a beam),
// and the first K others are the next beams (fairseq, CTranslate2 and transformers' BeamSearchScorer
// with early_stopping=True). A sentence is done once K hypotheses have finished, or at its length
// limit (BeamLimit). Done sentences leave the batch, so the decoder only runs on sentences in
// progress.
//
// Scores: log_prob sums the log-probabilities of the tokens (and the EOS that ends a finished
// hypothesis) after the rules (constraints.h) were applied, as transformers ranks them; without
// constraints, exactly the model's. score = log_prob / length^length_penalty, length = tokens + 1
// with an EOS, tokens without (transformers' generated_len).
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/decoding/attention.h"
#include "qkv/decoding/constraints.h"

namespace qkv::decoding {

// Bounds of the options. A beam wider than kMaxBeamSize costs minutes a sentence for no gain.
inline constexpr int kMaxBeamSize = 1024;
inline constexpr float kMaxLengthPenalty = 10.f;

struct Hypothesis {
  std::vector<int32_t> tokens;  // without BOS and EOS
  double log_prob = 0;          // includes EOS when the hypothesis finished with it
  double score = 0;             // log_prob / length^length_penalty
  bool finished = false;        // ended with EOS (false: cut at the length limit)
  AttentionWeights attention;   // seq2seq with SearchOptions::attention
};

// What a search needs of a model: N rows decoded together, their next token's logits one step at a
// time, and rows kept, dropped or duplicated between steps.
class DecoderSteps {
 public:
  virtual ~DecoderSteps() = default;
  // The logits (N, V) of each row's first new token, float32, contiguous, on the model's device (a
  // search on a GPU brings back only what it needs: score_step). Called once.
  virtual Tensor first_logits() = 0;
  // Appends `tokens` (one per row) and returns the next logits as first_logits does.
  virtual Tensor next_logits(const std::vector<int32_t>& tokens) = 0;
  // Row i continues old row rows[i]; rows may be fewer than before (finished sentences dropped).
  virtual void reorder(const std::vector<int64_t>& rows) = 0;
};

// What happens to a sentence's live beams when it reaches its limit of new tokens.
enum class BeamLimit {
  EndWithEos,  // each takes EOS (with its log-probability) after `limit` tokens: fairseq's and
               // CTranslate2's translation
  Cut,         // each ends as it is, without EOS, at `limit` tokens: transformers' max_new_tokens
};

struct BeamSettings {
  int beam_size = 4;  // K: the decoder holds K rows per sentence, sentence b in rows [b K, b K + K)
  int n_best = 1;     // hypotheses returned per sentence, <= K
  float length_penalty = 1.0f;
  BeamLimit at_limit = BeamLimit::EndWithEos;
  // Once K hypotheses have finished, an EOS in the same step that scores better than the worst of
  // them takes its place (transformers' BeamHypotheses.add); false: the first K to finish are kept
  // (fairseq, CTranslate2). Only the n-best past the first can differ.
  bool better_replaces_worst = false;
  StepRules rules;
};

// A hypothesis found and where: the step of its last token (its EOS, if it has one) and the row it
// was on then (to trace its attention weights back).
struct FoundHypothesis {
  Hypothesis hypothesis;
  int64_t step = 0, row = 0;
};

// Beam search of B sentences: `contexts[b]` is what the rules read before sentence b's new tokens
// (constraints.h), `limits[b]` (>= 1) its most new tokens. Returns each sentence's n_best, best first.
std::vector<std::vector<FoundHypothesis>> beam_search_steps(DecoderSteps& decoder,
                                                            const std::vector<std::vector<int32_t>>& contexts,
                                                            const std::vector<int64_t>& limits,
                                                            const BeamSettings& settings);

// log_prob / length^alpha (alpha 0: log_prob).
double normalised(double log_prob, size_t length, float alpha);

}  // namespace qkv::decoding
