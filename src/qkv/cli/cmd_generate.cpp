// qkv generate --checkpoint DIR (--prompt TEXT | --input FILE) --max-new-tokens N [--ids]
//              [--do-sample [--temperature T] [--top-k K] [--top-p P] [--seed S]]
//              [--beam-size K [--num-hypotheses N] [--length-penalty A]]
//              [--min-new-tokens N] [--repetition-penalty P] [--no-repeat-ngram-size N]
//              [--batch-size N] [--truncate-prompt] [--threads N] [--quiet]
//
// Continues text with a decoder-only checkpoint. Greedy by default; --do-sample draws (decoding/
// sampling.h: temperature, then top-k, then top-p, as Hugging Face's generate); --beam-size K > 1
// runs the beam search translation uses (decoding/beam.h). The token rules (decoding/constraints.h)
// apply to all three. The prompt is not echoed: the output is the new tokens only, EOS not
// included; with --num-hypotheses N > 1, N lines a prompt, "index ||| text ||| log-prob ||| score".
//   --prompt TEXT  one prompt; its continuation streams to stdout as it is produced (flushed per
//                  token), then a newline.
//   --input FILE   one prompt a line ('-' = stdin), batched; one output line per input line, in order.
// Text is encoded with the checkpoint's spm.model (or an imported tokenizer.json) and every text prompt starts with the model's
// bos_id: a document start. `qkv train --arch decoder-only` sets bos_id = eos_id, the separator its
// training stream has before every line (GPT-2's <|endoftext|>), so a prompt is read as the start
// of a line, an empty line generates a line from nothing, and EOS, the end of the line, stops it.
// With --ids, prompts and outputs are space-separated token ids, used as given; an empty --ids
// prompt is bos_id alone.
// Line i (0-based; --prompt is line 0) draws from the random stream keyed by (--seed, i), so a
// line's output does not depend on --batch-size, --threads or the other lines.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "qkv/api/generator.h"
#include "qkv/cli/attention_out.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/commands.h"
#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/id_text.h"
#include "qkv/cli/output_file.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/search_flags.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
inline constexpr double kMaxNewTokens = 1 << 20;

struct GenerateCliOptions {
  std::string checkpoint, prompt, input;
  bool ids = false, sample = false, truncate_prompt = false, quiet = false, ignore_eos = false;
  std::string attention_out;  // --attention-out DIR
  std::string output = "-";   // -o/--output
  ComputeTypeOption compute;
  int64_t max_new_tokens = 0, batch_size = 32;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  int beam_size = 1, num_hypotheses = 1;
  float length_penalty = 1.0f, repetition_penalty = 1.0f;
  int64_t min_new_tokens = 0, no_repeat_ngram_size = 0;
  // Given on the command line (checked against each other before anything is loaded).
  const CLI::Option *prompt_opt = nullptr, *input_opt = nullptr, *temperature_opt = nullptr, *top_k_opt = nullptr,
                    *top_p_opt = nullptr, *seed_opt = nullptr, *attention_opt = nullptr;
};

decoding::GenerateOptions decode_options(const GenerateCliOptions& o) {
  decoding::GenerateOptions d;
  d.max_new_tokens = o.max_new_tokens;
  d.sample = o.sample;
  d.sampling.temperature = o.temperature;
  d.sampling.top_k = o.top_k;
  d.sampling.top_p = o.top_p;
  d.seed = o.seed;
  d.stop_at_eos = !o.ignore_eos;
  d.long_prompt = o.truncate_prompt ? decoding::LongPrompt::TruncateLeft : decoding::LongPrompt::Refuse;
  d.min_new_tokens = o.min_new_tokens;
  d.constraints.repetition_penalty = o.repetition_penalty;
  d.constraints.no_repeat_ngram_size = o.no_repeat_ngram_size;
  d.beam_size = o.beam_size;
  d.num_hypotheses = o.num_hypotheses;
  d.length_penalty = o.length_penalty;
  return d;
}

bool beam_search(const GenerateCliOptions& o) { return o.beam_size > 1 || o.num_hypotheses > 1; }

// Usage errors found by looking at the flags alone.
void check_flags(const GenerateCliOptions& o) {
  const bool prompt = o.prompt_opt->count() > 0, input = o.input_opt->count() > 0;
  if (prompt && input) throw UsageError("--prompt and --input: give one of them, not both");
  if (!prompt && !input) throw UsageError("give --prompt TEXT or --input FILE");
  if (!o.sample)
    for (const CLI::Option* opt : {o.temperature_opt, o.top_k_opt, o.top_p_opt, o.seed_opt})
      if (opt->count() > 0)
        throw UsageError(opt->get_name() + " applies only with --do-sample (without it, generation is greedy)");
  if (beam_search(o) && o.attention_opt->count() > 0)
    throw UsageError("--attention-out keeps the weights of greedy and sampled generation, not of beam search (--beam-size " +
                     std::to_string(o.beam_size) + ")");
  try {  // the vocabulary is not known yet: --beam-size is checked against it once the model is loaded
    decoding::validate_generate_options(decode_options(o), std::numeric_limits<int64_t>::max());
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// Beam search of every prompt (not streamed: a beam's best is known at its end), written in input
// order: the best continuation a line, or with --num-hypotheses N > 1 N lines "index ||| text |||
// log-prob ||| score" (as `qkv translate`). Returns the number of new tokens written.
int64_t write_beam_results(const GenerateCliOptions& o, const api::Generator& generator,
                           const std::vector<std::vector<int32_t>>& prompts, const api::GenerationOptions& go,
                           OutputFile& out) {
  ProgressLine progress("generated", "lines", o.quiet || prompts.size() == 1);
  const auto results =
      generator.generate_hypotheses_ids(prompts, go, [&](int64_t done, int64_t total) { progress.update(done, total); });
  progress.finish();
  int64_t new_tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].empty()) out.write("\n");  // no room in the context for a new token
    for (const decoding::Hypothesis& h : results[i]) {
      new_tokens += static_cast<int64_t>(h.tokens.size());
      const std::string text = o.ids ? join_ids(h.tokens) : generator.decode(h.tokens);
      if (o.num_hypotheses > 1)
        out.printf("%zu ||| %s ||| %.6f ||| %.6f\n", i, text.c_str(), h.log_prob, h.score);
      else
        out.write(text + "\n");  // whole: a drawn token may decode to a NUL byte
    }
  }
  return new_tokens;
}

int run_generate(const GenerateCliOptions& o) {
  check_flags(o);  // before loading: fail fast
  check_checkpoint_argument(o.checkpoint);
  check_output_is_no_input(o.output, {{"--input", o.input}});
  OutputFile out(o.output);  // before the model loads: a path that cannot be written fails at once
  set_num_threads(o.threads);
  const api::Generator generator(o.checkpoint, chosen_compute_type(o.compute), chosen_device(o.compute.device));
  const int64_t V = generator.vocab_size();
  QKV_CHECK(o.ids || generator.tokenizer(), o.checkpoint << ": no " << models::kLmSpmFile << " or " << models::kLmBpeFile
                                                         << " for text prompts; use --ids for token ids");
  api::GenerationOptions go;
  go.decode = decode_options(o);
  go.batch_size = o.batch_size;
  try {
    decoding::validate_generate_options(go.decode, V);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }

  // Prompts as ids, BOS first for text; `where` names each in messages.
  const bool single = o.prompt_opt->count() > 0;
  const std::vector<std::string> lines = single ? std::vector<std::string>{o.prompt} : text::read_text_lines_or_stdin(o.input);
  const std::string source = o.input == "-" ? "<stdin>" : o.input;
  auto where = [&](size_t i) { return single ? std::string("--prompt") : source + ":" + std::to_string(i + 1); };
  const int32_t bos = static_cast<int32_t>(generator.config().bos_id);
  QKV_CHECK(bos >= 0 && bos < V, o.checkpoint << ": the model has no BOS id (" << bos << ") to start a prompt with");
  std::vector<std::vector<int32_t>> prompts(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    prompts[i] = o.ids ? parse_ids(lines[i], where(i), V) : generator.encode_prompt(lines[i]);
    if (prompts[i].empty()) prompts[i].push_back(bos);
  }
  const int64_t truncated = generator.check_prompts(prompts, go, where, "--truncate-prompt keeps its last tokens");
  if (truncated && !o.quiet)
    std::fprintf(stderr, "qkv generate: %lld prompt(s) cut to their last tokens to leave room for the new ones\n",
                 static_cast<long long>(truncated));

  const bool attention = !o.attention_out.empty();
  if (attention) make_attention_dir(o.attention_out);  // before the work: fail fast
  std::vector<decoding::AttentionWeights> weights(attention ? prompts.size() : 0);
  std::vector<std::vector<int32_t>> outputs;
  Stopwatch clock;
  int64_t new_tokens = 0;
  if (beam_search(o)) {
    new_tokens = write_beam_results(o, generator, prompts, go, out);
  } else if (single) {
    std::unique_ptr<api::TextStream> stream =
        !o.ids && generator.tokenizer() ? std::make_unique<api::TextStream>(*generator.tokenizer()) : nullptr;
    bool first = true;
    const auto print = [&out](const std::string& piece) {
      out.write(piece);
      out.flush();
    };
    const auto produced = generator.generate_streaming(prompts[0], go, [&](int32_t token) {
      if (stream) {
        print(stream->push(token));
      } else {
        out.printf(first ? "%d" : " %d", token);
        out.flush();
      }
      first = false;
    }, attention ? &weights[0] : nullptr);
    if (stream) print(stream->finish());
    out.write("\n");
    new_tokens = static_cast<int64_t>(produced.size());
    outputs.push_back(produced);
  } else {
    ProgressLine progress("generated", "lines", o.quiet);
    const auto results = generator.generate_ids(
        prompts, go, [&](int64_t done, int64_t total) { progress.update(done, total); }, 0,
        attention ? &weights : nullptr);
    outputs = results;
    progress.finish();
    for (const auto& r : results) {
      new_tokens += static_cast<int64_t>(r.size());
      out.write((o.ids ? join_ids(r) : generator.decode(r)) + "\n");
    }
  }
  out.close();
  const double t = clock.seconds();
  if (!o.quiet)
    std::fprintf(stderr, "qkv generate: %zu line(s), %lld new tokens in %s (%.0f tokens/s), %s\n", prompts.size(),
                 static_cast<long long>(new_tokens), format_duration(t).c_str(), t > 0 ? new_tokens / t : 0.0,
                 o.sample ? "sampled" : beam_search(o) ? ("beam " + std::to_string(o.beam_size)).c_str() : "greedy");
  if (attention) {  // DIR/NNNN.npz per line, then the pictures
    std::vector<std::string> files;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (weights[i].decoder_self.empty()) continue;  // nothing generated (no room in the context)
      std::vector<std::string> pieces;
      for (int32_t id : generator.tokens_read(prompts[i], outputs[i], go, weights[i].decoder_self[0].size(1)))
        pieces.push_back(generator.piece(id));
      files.push_back(attention_file(o.attention_out, i + 1));
      write_generation_attention(files.back(), pieces, weights[i]);
    }
    draw_attention_files(o.attention_out, files);
    if (!o.quiet)
      std::fprintf(stderr, "qkv generate: attention of %zu line(s) in %s (NNNN.npz, NNNN-self-layerL.png)\n",
                   files.size(), o.attention_out.c_str());
  }
  return 0;
}
}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateCliOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Checkpoint directory (a decoder-only model)")->required();
  o->prompt_opt = app.add_option("--prompt", o->prompt, "One prompt; its continuation streams to stdout");
  o->input_opt = app.add_option("--input", o->input, "Prompts, one a line ('-' = stdin); one output line each");
  app.add_flag("--ids", o->ids, "Prompts and outputs are space-separated token ids (no SentencePiece)");
  app.add_option("--max-new-tokens", o->max_new_tokens, "New tokens per prompt at most (fewer when the context is full)")
      ->required()
      ->check(FiniteRange(1, kMaxNewTokens));
  app.add_flag("--do-sample", o->sample, "Sample the next token (default: greedy, the most probable)");
  app.add_flag("--ignore-eos", o->ignore_eos,
               "EOS does not end a prompt's continuation: every one gets --max-new-tokens (benchmarks; as vLLM's ignore_eos)");
  add_sampling_flags(app, o.get(), "With --do-sample: the random stream");
  app.add_option("--beam-size", o->beam_size, "Beam search with K beams (1 = greedy; not with --do-sample)")
      ->capture_default_str()
      ->check(FiniteRange(1, decoding::kMaxBeamSize));
  app.add_option("--num-hypotheses", o->num_hypotheses,
                 "Continuations per prompt (<= --beam-size): 'index ||| text ||| log-prob ||| score'")
      ->capture_default_str()
      ->check(FiniteRange(1, decoding::kMaxBeamSize));
  app.add_option("--length-penalty", o->length_penalty, "With --beam-size: rank by log-prob / length^alpha")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxLengthPenalty));
  app.add_option("--min-new-tokens", o->min_new_tokens, "EOS is refused before this many new tokens")
      ->capture_default_str()
      ->check(FiniteRange(0, kMaxNewTokens));
  add_repetition_flags(app, o.get(), "the prompt or output");
  app.add_option("--batch-size", o->batch_size, "Prompts generated together (--input)")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_flag("--truncate-prompt", o->truncate_prompt,
               "Cut long prompts from the left to leave room for --max-new-tokens (default: refuse a prompt that fills the context)");
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_compute_type_options(app, o->compute);
  add_quiet_flag(app, o->quiet, "No progress, summary or notes on stderr (errors still)");
  add_output_option(app, o->output, "Where the continuations go (--prompt: streamed as they are made)");
  o->attention_opt = app.add_option("--attention-out", o->attention_out,
                 "Write each line's self-attention weights (DIR/NNNN.npz) and heatmaps of them "
                 "(DIR/NNNN-self-layerL.png; needs python3-matplotlib)");
  return [o]() { return run_generate(*o); };
}

}  // namespace qkv::cli
