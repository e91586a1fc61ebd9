// qkv translate --checkpoint DIR [--input FILE] [--beam N] [--n-best N] ...
//
// Reads one source sentence a line (stdin by default) and writes one translation a line to stdout,
// in input order. Text is encoded with the checkpoint's tokenizers (its SentencePiece models
// source.spm.model and target.spm.model, or an imported Marian model's source.spm, target.spm and
// vocab.json); with --ids, lines are space-separated token ids in and out (a source line as given:
// an imported model's sources end with their EOS, as its tokenizer writes them). Sentences are
// batched (sorted by length for less padding) and a summary goes to stderr.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>

#include "qkv/api/translator.h"
#include "qkv/cli/attention_out.h"
#include "qkv/cli/commands.h"
#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/id_text.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
struct TranslateOptions {
  std::string checkpoint, input = "-";
  bool ids = false;
  int beam = 4, n_best = 1, threads = 0;
  float length_penalty = 1.0f, max_length_ratio = 2.0f;
  int64_t max_length_offset = 10, batch_size = 32;
  std::string too_long = "truncate";
  ComputeTypeOption compute;
  bool quiet = false;
  std::string attention_out;  // --attention-out DIR
};

// The input's lines as token ids (empty for an empty line), cut to max_seq_length or refused as
// --too-long says.
std::vector<data::IdLine> read_sources(const TranslateOptions& o, const api::Translator& translator,
                                       const api::TranslationOptions& to) {
  const std::vector<std::string> lines = text::read_text_lines_or_stdin(o.input);
  const std::string where = o.input == "-" ? "<stdin>" : o.input;
  const models::TransformerConfig& c = translator.config();
  std::vector<data::IdLine> sources(lines.size());
  int64_t truncated = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line_where = where + ":" + std::to_string(i + 1);
    if (!o.ids) {
      bool cut = false;
      sources[i] = translator.encode_source(lines[i], to, line_where, &cut);
      truncated += cut;
      continue;
    }
    sources[i] = parse_ids(lines[i], line_where, c.src_vocab_size);
    if (static_cast<int64_t>(sources[i].size()) > c.max_seq_length) {
      QKV_CHECK(to.truncate, line_where << ": " << sources[i].size() << " tokens exceed the model's max_seq_length "
                                        << c.max_seq_length << " (use --too-long truncate)");
      sources[i].resize(static_cast<size_t>(c.max_seq_length));
      ++truncated;
    }
  }
  if (truncated)
    std::fprintf(stderr, "qkv translate: warning: %lld sentence(s) longer than %lld tokens were truncated\n",
                 static_cast<long long>(truncated), static_cast<long long>(c.max_seq_length));
  return sources;
}

// The checks of flags against each other and against the checkpoint: --n-best <= --beam <= the
// target vocabulary size. Usage errors, like a flag out of its range.
void check_search_flags(const TranslateOptions& o, int64_t tgt_vocab_size) {
  if (o.n_best > o.beam)
    throw UsageError("--n-best " + std::to_string(o.n_best) + " exceeds --beam " + std::to_string(o.beam) +
                     " (a beam keeps at most --beam hypotheses)");
  if (o.beam > tgt_vocab_size)
    throw UsageError("--beam " + std::to_string(o.beam) + " exceeds the checkpoint's target vocabulary size " +
                     std::to_string(tgt_vocab_size));
}

// --attention-out: DIR/NNNN.npz per translated line (its best hypothesis), then the pictures.
void write_attention(const TranslateOptions& o, const api::Translator& translator, const std::vector<data::IdLine>& sources,
                     const std::vector<std::vector<api::Translation>>& results) {
  const auto& c = translator.config();
  std::vector<std::string> files;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (results[i].empty()) continue;
    const api::Translation& best = results[i][0];
    std::vector<std::string> src, tgt, dec_in{translator.target_piece(static_cast<int32_t>(c.bos_id))};
    for (int32_t id : sources[i]) src.push_back(translator.source_piece(id));
    for (int32_t id : best.tokens) {
      tgt.push_back(translator.target_piece(id));
      dec_in.push_back(tgt.back());
    }
    tgt.push_back(translator.target_piece(static_cast<int32_t>(c.eos_id)));
    files.push_back(attention_file(o.attention_out, i + 1));
    write_translation_attention(files.back(), src, tgt, dec_in, best.attention);
  }
  draw_attention_files(o.attention_out, files);
  if (!o.quiet)
    std::fprintf(stderr, "qkv translate: attention of %zu sentence(s) in %s (NNNN.npz, NNNN-cross-layerL.png)\n",
                 files.size(), o.attention_out.c_str());
}

int run_translate(const TranslateOptions& o) {
  check_search_flags(o, std::numeric_limits<int64_t>::max());  // before loading: fail fast
  check_checkpoint_argument(o.checkpoint);
  set_num_threads(o.threads);
  const api::Translator translator(o.checkpoint, chosen_compute_type(o.compute), chosen_device(o.compute.device));
  check_search_flags(o, translator.config().tgt_vocab_size);
  QKV_CHECK(o.ids || translator.has_tokenizers(),
            o.checkpoint << ": no tokenizer (source.spm.model / target.spm.model, or an imported model's "
                             "source.spm, target.spm and vocab.json) for text input; use --ids for token ids");
  api::TranslationOptions to;
  to.search.beam_size = o.beam;
  to.search.n_best = o.n_best;
  to.search.length_penalty = o.length_penalty;
  to.search.max_length_ratio = o.max_length_ratio;
  to.search.max_length_offset = o.max_length_offset;
  to.batch_size = o.batch_size;
  to.truncate = o.too_long == "truncate";
  to.search.attention = !o.attention_out.empty();
  if (to.search.attention) make_attention_dir(o.attention_out);  // before the work: fail fast
  const std::vector<data::IdLine> sources = read_sources(o, translator, to);

  Stopwatch clock;
  const bool tty = ::isatty(STDERR_FILENO);
  int64_t done = 0;
  const auto results = translator.translate_ids(sources, to, [&](int64_t finished, int64_t total) {
    done = finished;
    if (o.quiet) return;
    std::fprintf(stderr, tty ? "\rtranslated %lld/%lld sentences" : "translated %lld/%lld sentences\n",
                 static_cast<long long>(finished), static_cast<long long>(total));
    std::fflush(stderr);
  });
  if (!o.quiet && tty && done > 0) std::fprintf(stderr, "\n");
  int64_t out_tokens = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].empty()) {
      std::printf("\n");
      continue;
    }
    for (const auto& h : results[i]) {
      out_tokens += static_cast<int64_t>(h.tokens.size()) + 1;
      const std::string text = o.ids ? join_ids(h.tokens) : h.text;
      if (o.n_best > 1)  // sentence index ||| hypothesis ||| log-probability ||| normalised score
        std::printf("%zu ||| %s ||| %.6f ||| %.6f\n", i, text.c_str(), h.log_prob, h.score);
      else
        std::printf("%s\n", text.c_str());
    }
  }
  std::fflush(stdout);
  const double t = clock.seconds();
  if (!o.quiet)
    std::fprintf(stderr, "qkv translate: %lld sentences, %lld output tokens in %s (%.1f sentences/s, %.0f tokens/s), beam %d\n",
                 static_cast<long long>(done), static_cast<long long>(out_tokens), format_duration(t).c_str(), done / t,
                 out_tokens / t, o.beam);
  if (!o.attention_out.empty()) write_attention(o, translator, sources, results);
  return 0;
}
}  // namespace

Runner add_translate_command(CLI::App& app) {
  auto o = std::make_shared<TranslateOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Checkpoint directory")->required();
  app.add_option("--input", o->input, "Source text, one sentence a line ('-' = stdin)")->capture_default_str();
  app.add_flag("--ids", o->ids, "Input and output are space-separated token ids (no tokenizer; a source line is taken as given)");
  app.add_option("--beam", o->beam, "Beam size (1 = greedy; at most the target vocabulary size)")
      ->capture_default_str()
      ->check(FiniteRange(1, decoding::kMaxBeamSize));
  app.add_option("--n-best", o->n_best, "Hypotheses per sentence (<= --beam): 'index ||| text ||| log-prob ||| score'")
      ->capture_default_str()
      ->check(FiniteRange(1, decoding::kMaxBeamSize));
  app.add_option("--length-penalty", o->length_penalty, "alpha in log-prob / length^alpha")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxLengthPenalty));
  app.add_option("--max-length-ratio", o->max_length_ratio, "Output limit: ratio * source length + offset")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxLengthRatio));
  app.add_option("--max-length-offset", o->max_length_offset, "See --max-length-ratio")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxLengthOffset));
  app.add_option("--batch-size", o->batch_size, "Sentences decoded together")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--too-long", o->too_long, "Sources longer than max_seq_length: truncate (with a warning) or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"truncate", "error"}));
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_compute_type_options(app, o->compute);
  app.add_flag("--quiet", o->quiet, "No progress or summary on stderr");
  app.add_option("--attention-out", o->attention_out,
                 "Write each sentence's attention weights (DIR/NNNN.npz, the best hypothesis) and heatmaps of its "
                 "cross-attention (DIR/NNNN-cross-layerL.png; needs python3-matplotlib)");
  return [o]() { return run_translate(*o); };
}

}  // namespace qkv::cli
