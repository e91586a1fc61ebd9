// The search flags that `qkv translate` and `qkv generate` share (docs/cli.md#search): sampling
// (--temperature, --top-k, --top-p, --seed) and the repetition rules (--repetition-penalty,
// --no-repeat-ngram-size), with one set of bounds. Each command's options struct has the fields
// these write (and *_opt handles for the sampling flags, which must come with --do-sample).
#pragma once
#include <CLI/CLI.hpp>

#include <limits>

#include "qkv/cli/validators.h"
#include "qkv/decoding/constraints.h"

namespace qkv::cli {

template <class Options>
void add_sampling_flags(CLI::App& app, Options* o, const char* seed_help) {
  o->temperature_opt = app.add_option("--temperature", o->temperature, "With --do-sample: logits / T")
                           ->capture_default_str()
                           ->check(Positive());
  o->top_k_opt = app.add_option("--top-k", o->top_k, "With --do-sample: keep the K most probable tokens (0 = all)")
                     ->capture_default_str()
                     ->check(NonNegative());
  o->top_p_opt = app.add_option("--top-p", o->top_p, "With --do-sample: keep the most probable tokens up to mass P (1 = all)")
                     ->capture_default_str()
                     ->check(FiniteRange(std::numeric_limits<double>::min(), 1, "in (0, 1]"));
  o->seed_opt = app.add_option("--seed", o->seed, seed_help)->capture_default_str();
}

// `where`: what the rules look at ("the prompt or output", "the output"), for the help.
template <class Options>
void add_repetition_flags(CLI::App& app, Options* o, const std::string& where) {
  app.add_option("--repetition-penalty", o->repetition_penalty,
                 "Scores of tokens already in " + where +
                     " divided (positive) or multiplied (negative) by P (1 = off)")
      ->capture_default_str()
      ->check(FiniteRange(std::numeric_limits<double>::min(), decoding::kMaxRepetitionPenalty, "in (0, 1000]"));
  app.add_option("--no-repeat-ngram-size", o->no_repeat_ngram_size,
                 "No n-gram of this size occurs twice in " + where + " (0 = off)")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxNoRepeatNgramSize));
}

}  // namespace qkv::cli
