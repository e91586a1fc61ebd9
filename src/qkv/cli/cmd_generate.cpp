// qkv generate --checkpoint DIR (--prompt TEXT | --input FILE) --max-new-tokens N [--ids]
//              [--sample [--temperature T] [--top-k K] [--top-p P] [--seed S]] [--batch-size N]
//              [--truncate-prompt] [--threads N] [--quiet]
//
// Continues text with a decoder-only checkpoint. Greedy by default; --sample draws (decoding/
// sampling.h: temperature, then top-k, then top-p, as Hugging Face's generate). The prompt is not
// echoed: the output is the new tokens only, EOS not included.
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
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "qkv/cli/commands.h"
#include "qkv/cli/id_text.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/decoding/generate.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
inline constexpr double kMaxNewTokens = 1 << 20;

struct GenerateCliOptions {
  std::string checkpoint, prompt, input;
  bool ids = false, sample = false, truncate_prompt = false, quiet = false;
  int64_t max_new_tokens = 0, batch_size = 32;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  // Given on the command line (checked against each other before anything is loaded).
  const CLI::Option *prompt_opt = nullptr, *input_opt = nullptr, *temperature_opt = nullptr, *top_k_opt = nullptr,
                    *top_p_opt = nullptr, *seed_opt = nullptr;
};

// Usage errors found by looking at the flags alone.
void check_flags(const GenerateCliOptions& o) {
  const bool prompt = o.prompt_opt->count() > 0, input = o.input_opt->count() > 0;
  if (prompt && input) throw UsageError("--prompt and --input: give one of them, not both");
  if (!prompt && !input) throw UsageError("give --prompt TEXT or --input FILE");
  if (!o.sample)
    for (const CLI::Option* opt : {o.temperature_opt, o.top_k_opt, o.top_p_opt, o.seed_opt})
      if (opt->count() > 0)
        throw UsageError(opt->get_name() + " applies only with --sample (without it, generation is greedy)");
  decoding::SamplingOptions s;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  try {
    decoding::validate_sampling_options(s);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// Prints the text of the new tokens as they come: after each token the whole continuation is
// decoded again and what extends the text already printed is written and flushed. A trailing
// U+FFFD (byte pieces of a character not complete yet) waits for the next token.
class TextStream {
 public:
  explicit TextStream(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  void push(int32_t id) {
    ids_.push_back(id);
    emit(false);
  }
  void finish() { emit(true); }

 private:
  void emit(bool final) {
    std::string text = tokenizer_.decode(ids_);
    static const std::string kReplacement = "\xEF\xBF\xBD";
    while (!final && text.size() >= kReplacement.size() &&
           text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
      text.resize(text.size() - kReplacement.size());
    if (text.size() > printed_.size() && text.compare(0, printed_.size(), printed_) == 0) {
      std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
      std::fflush(stdout);
      printed_ = std::move(text);
    }
  }
  const text::Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  std::string printed_;
};

int run_generate(const GenerateCliOptions& o) {
  check_flags(o);  // before loading: fail fast
  check_checkpoint_argument(o.checkpoint);
  set_num_threads(o.threads);
  auto model = models::load_causal_lm(o.checkpoint);
  model->eval();
  const auto& c = model->config();
  const int64_t V = model->output_vocab_size();
  std::unique_ptr<text::Tokenizer> tokenizer;  // spm.model, or an imported model's tokenizer.json
  if (!o.ids) {
    const std::string path = models::lm_tokenizer_path(o.checkpoint);
    QKV_CHECK(!path.empty(), o.checkpoint << ": no " << models::kLmSpmFile << " or " << models::kLmBpeFile
                                          << " for text prompts; use --ids for token ids");
    tokenizer = text::load_tokenizer(path);
    // An imported model's vocabulary may be padded beyond its tokenizer's; ours are equal.
    QKV_CHECK(tokenizer->vocab_size() <= V, path << " has " << tokenizer->vocab_size()
                                           << " tokens but the model's vocabulary is " << V);
  }

  decoding::GenerateOptions go;
  go.max_new_tokens = o.max_new_tokens;
  go.sample = o.sample;
  go.sampling.temperature = o.temperature;
  go.sampling.top_k = o.top_k;
  go.sampling.top_p = o.top_p;
  go.seed = o.seed;
  go.long_prompt = o.truncate_prompt ? decoding::LongPrompt::TruncateLeft : decoding::LongPrompt::Refuse;

  // Prompts as ids, BOS first for text; `where` names each in messages.
  const bool single = o.prompt_opt->count() > 0;
  const std::vector<std::string> lines = single ? std::vector<std::string>{o.prompt} : text::read_text_lines_or_stdin(o.input);
  const std::string source = o.input == "-" ? "<stdin>" : o.input;
  auto where = [&](size_t i) { return single ? std::string("--prompt") : source + ":" + std::to_string(i + 1); };
  QKV_CHECK(c.bos_id >= 0 && c.bos_id < V, o.checkpoint << ": the model has no BOS id (" << c.bos_id << ") to start a prompt with");
  std::vector<std::vector<int32_t>> prompts(lines.size());
  int64_t truncated = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (o.ids) {
      prompts[i] = parse_ids(lines[i], where(i), V);
      if (prompts[i].empty()) prompts[i].push_back(c.bos_id);
    } else {
      prompts[i].push_back(c.bos_id);
      const std::vector<int32_t> text_ids = tokenizer->encode(lines[i]);
      prompts[i].insert(prompts[i].end(), text_ids.begin(), text_ids.end());
    }
    try {
      truncated += decoding::fit_prompt(prompts[i], c.max_seq_length, go).truncated;
    } catch (const Error& e) {
      throw Error(where(i) + ": " + e.what() + (o.truncate_prompt ? "" : "; --truncate-prompt keeps its last tokens"));
    }
  }
  if (truncated && !o.quiet)
    std::fprintf(stderr, "qkv generate: %lld prompt(s) cut to their last tokens to leave room for the new ones\n",
                 static_cast<long long>(truncated));

  Stopwatch clock;
  int64_t new_tokens = 0;
  if (single) {
    std::unique_ptr<TextStream> stream = tokenizer ? std::make_unique<TextStream>(*tokenizer) : nullptr;
    bool first = true;
    const auto out = decoding::generate(*model, prompts, {0}, go, [&](size_t, int32_t token) {
      if (stream) {
        stream->push(token);
      } else {
        std::printf(first ? "%d" : " %d", token);
        std::fflush(stdout);
      }
      first = false;
    });
    if (stream) stream->finish();
    std::printf("\n");
    new_tokens = static_cast<int64_t>(out[0].size());
  } else {
    // Batches of similar length (less padding); each line keeps its own random stream.
    std::vector<size_t> order(prompts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
    std::vector<std::vector<int32_t>> results(prompts.size());
    const bool tty = ::isatty(STDERR_FILENO);
    for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(o.batch_size)) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(o.batch_size));
      std::vector<std::vector<int32_t>> batch;
      std::vector<uint64_t> keys;
      for (size_t i = begin; i < end; ++i) {
        batch.push_back(prompts[order[i]]);
        keys.push_back(order[i]);
      }
      auto out = decoding::generate(*model, batch, keys, go);
      for (size_t i = begin; i < end; ++i) {
        new_tokens += static_cast<int64_t>(out[i - begin].size());
        results[order[i]] = std::move(out[i - begin]);
      }
      if (!o.quiet) {
        std::fprintf(stderr, tty ? "\rgenerated %zu/%zu lines" : "generated %zu/%zu lines\n", end, order.size());
        std::fflush(stderr);
      }
    }
    if (!o.quiet && tty && !order.empty()) std::fprintf(stderr, "\n");
    for (const auto& r : results) std::printf("%s\n", (o.ids ? join_ids(r) : tokenizer->decode(r)).c_str());
  }
  const double t = clock.seconds();
  if (!o.quiet)
    std::fprintf(stderr, "qkv generate: %zu line(s), %lld new tokens in %s (%.0f tokens/s), %s\n", prompts.size(),
                 static_cast<long long>(new_tokens), format_duration(t).c_str(), t > 0 ? new_tokens / t : 0.0,
                 o.sample ? "sampled" : "greedy");
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
  app.add_flag("--sample", o->sample, "Sample the next token (default: greedy, the most probable)");
  o->temperature_opt = app.add_option("--temperature", o->temperature, "With --sample: logits / T")
                           ->capture_default_str()
                           ->check(Positive());
  o->top_k_opt = app.add_option("--top-k", o->top_k, "With --sample: keep the K most probable tokens (0 = all)")
                     ->capture_default_str()
                     ->check(NonNegative());
  o->top_p_opt = app.add_option("--top-p", o->top_p, "With --sample: keep the most probable tokens up to mass P (1 = all)")
                     ->capture_default_str()
                     ->check(FiniteRange(std::numeric_limits<double>::min(), 1, "in (0, 1]"));
  o->seed_opt = app.add_option("--seed", o->seed, "With --sample: the random stream")->capture_default_str();
  app.add_option("--batch-size", o->batch_size, "Prompts generated together (--input)")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_flag("--truncate-prompt", o->truncate_prompt,
               "Cut long prompts from the left to leave room for --max-new-tokens (default: refuse a prompt that fills the context)");
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  app.add_flag("--quiet", o->quiet, "No progress or summary on stderr");
  return [o]() { return run_generate(*o); };
}

}  // namespace qkv::cli
