// qkv translate --checkpoint DIR [--input FILE] [-o FILE] [--beam-size N] [--num-hypotheses N] ...
//               [--do-sample [--temperature T] [--top-k K] [--top-p P] [--seed S]]
//               [--min-length N] [--repetition-penalty P] [--no-repeat-ngram-size N]
//
// Beam search by default (4 beams; decoding/beam.h, the search every family shares); --beam-size 1
// is greedy, --do-sample draws each token as `qkv generate --do-sample` does (decoding/sampling.h;
// sentence i keyed by (--seed, i)). The token rules (decoding/constraints.h) apply to all three.
//
// Reads one source sentence a line (stdin by default) and writes one translation a line to stdout
// or -o FILE, in input order, as batches finish. Text is encoded with the checkpoint's tokenizers (its SentencePiece models
// source.spm.model and target.spm.model, or an imported Marian model's source.spm, target.spm and
// vocab.json, or a multilingual model's: --source-lang and --target-lang choose its languages); with
// --ids, lines are space-separated token ids in and out (a source line as given:
// an imported model's sources end with their EOS, as its tokenizer writes them). Sentences are
// batched, sorted by length within windows of 16 batches (less padding, and the first lines of a
// long input come after its first window, not at the end); progress and a summary go to stderr.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "qkv/api/translator.h"
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
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
struct TranslateOptions {
  std::string checkpoint, input = "-", output = "-";
  bool ids = false;
  int beam = 4, n_best = 1, threads = 0;
  float length_penalty = 1.0f, max_length_ratio = 2.0f;
  int64_t max_length_offset = 10, batch_size = 32;
  std::string too_long = "truncate";
  ComputeTypeOption compute;
  bool quiet = false;
  std::string attention_out;  // --attention-out DIR
  std::string source_lang, target_lang;  // a multilingual model's languages ("": its defaults)
  bool sample = false;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0, min_length = 0, no_repeat_ngram_size = 0;
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;
  // Given on the command line (checked against each other before anything is loaded).
  const CLI::Option *beam_opt = nullptr, *temperature_opt = nullptr, *top_k_opt = nullptr, *top_p_opt = nullptr,
                    *seed_opt = nullptr;
};

// --do-sample draws one translation a sentence: without --beam-size it means beam 1.
int beam_size(const TranslateOptions& o) { return o.sample && o.beam_opt->count() == 0 ? 1 : o.beam; }

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
  if (truncated && !quiet_requested())
    std::fprintf(stderr, "qkv translate: warning: %lld sentence(s) longer than %lld tokens were truncated\n",
                 static_cast<long long>(truncated), static_cast<long long>(c.max_seq_length));
  return sources;
}

api::TranslationOptions translation_options(const TranslateOptions& o);

// The checks of flags against each other and against the checkpoint: --num-hypotheses <= --beam-size <= the
// target vocabulary size. Usage errors, like a flag out of its range.
void check_search_flags(const TranslateOptions& o, int64_t tgt_vocab_size) {
  if (!o.sample)
    for (const CLI::Option* opt : {o.temperature_opt, o.top_k_opt, o.top_p_opt, o.seed_opt})
      if (opt->count() > 0)
        throw UsageError(opt->get_name() + " applies only with --do-sample (without it, translation is a beam search)");
  if (o.sample && (beam_size(o) > 1 || o.n_best > 1))
    throw UsageError("--do-sample draws one translation a sentence: it does not go with --beam-size " +
                     std::to_string(beam_size(o)) + " or --num-hypotheses " + std::to_string(o.n_best));
  if (o.n_best > o.beam)
    throw UsageError("--num-hypotheses " + std::to_string(o.n_best) + " exceeds --beam-size " + std::to_string(o.beam) +
                     " (a beam keeps at most --beam-size hypotheses)");
  if (o.beam > tgt_vocab_size)
    throw UsageError("--beam-size " + std::to_string(o.beam) + " exceeds the checkpoint's target vocabulary size " +
                     std::to_string(tgt_vocab_size));
  try {
    decoding::validate_search_options(translation_options(o).search, tgt_vocab_size);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// A multilingual model (M2M100, NLLB, mBART-50) translates into the language whose code it is
// made to write first: without --target-lang and a forced_bos_id of its own it would write any.
// The flags are checked here, before any input is read.
void check_languages(const TranslateOptions& o, const api::Translator& translator) {
  if (!o.source_lang.empty() && o.ids)
    throw UsageError("--source-lang applies to text input: with --ids a source line is taken as given (its language "
                     "code included)");
  if (!o.source_lang.empty()) translator.language_id(o.source_lang, "--source-lang");
  if (!o.target_lang.empty()) {
    translator.language_id(o.target_lang, "--target-lang");
    return;
  }
  if (translator.multilingual() && translator.config().forced_bos_id < 0 &&
      translator.config().bos_id == translator.config().eos_id)
    throw UsageError("--target-lang is needed: " + o.checkpoint +
                     " is a multilingual model without a forced_bos_token_id of its own (give its tokenizer's code, "
                     "such as fr, fra_Latn or fr_XX)");
}

// Sentences sorted by length together: 16 batches, as CTranslate2's file translation reads them.
// A larger window pads less; a smaller one shows the first lines sooner.
constexpr int64_t kBatchesPerSortWindow = 16;

// --attention-out: DIR/NNNN.npz per translated line (its best hypothesis) as it is written, then
// the pictures of them all.
class AttentionFiles {
 public:
  AttentionFiles(const TranslateOptions& o, const api::Translator& translator, const std::vector<data::IdLine>& sources)
      : o_(o), translator_(translator), sources_(sources) {}

  void add(size_t index, const api::Translation& best) {
    const auto& c = translator_.config();
    std::vector<std::string> src, tgt, dec_in{translator_.target_piece(static_cast<int32_t>(c.bos_id))};
    for (int32_t id : sources_[index]) src.push_back(translator_.source_piece(id));
    for (int32_t id : best.tokens) {
      tgt.push_back(translator_.target_piece(id));
      dec_in.push_back(tgt.back());
    }
    tgt.push_back(translator_.target_piece(static_cast<int32_t>(c.eos_id)));
    files_.push_back(attention_file(o_.attention_out, index + 1));
    write_translation_attention(files_.back(), src, tgt, dec_in, best.attention);
  }

  void draw() const {
    draw_attention_files(o_.attention_out, files_);
    if (!o_.quiet)
      std::fprintf(stderr, "qkv translate: attention of %zu sentence(s) in %s (NNNN.npz, NNNN-cross-layerL.png)\n",
                   files_.size(), o_.attention_out.c_str());
  }

 private:
  const TranslateOptions& o_;
  const api::Translator& translator_;
  const std::vector<data::IdLine>& sources_;
  std::vector<std::string> files_;
};

// Writes translations in input order as batches finish: the batches of a window run in length
// order, so a sentence waits until it and every sentence before it are done. write_ready() after
// each batch writes that prefix and flushes it: a long job shows results early, an interrupted one
// keeps them, and only the waiting sentences are held in memory.
class InOrderWriter {
 public:
  InOrderWriter(const TranslateOptions& o, OutputFile& out, AttentionFiles* attention)
      : o_(o), out_(out), attention_(attention) {}

  void add(size_t index, std::vector<api::Translation>&& translations) { waiting_[index] = std::move(translations); }

  void write_ready() {
    for (auto it = waiting_.begin(); it != waiting_.end() && it->first == next_; it = waiting_.erase(it), ++next_)
      write_sentence(it->first, it->second);
    out_.flush();
  }

  bool all_written(size_t sentences) const { return next_ == sentences && waiting_.empty(); }
  int64_t output_tokens() const { return output_tokens_; }

 private:
  // One line, or with --num-hypotheses N lines "index ||| hypothesis ||| log-probability ||| normalised
  // score"; an empty source gives one empty line either way.
  void write_sentence(size_t index, const std::vector<api::Translation>& translations) {
    if (translations.empty()) out_.write("\n");
    for (const api::Translation& h : translations) {
      output_tokens_ += static_cast<int64_t>(h.tokens.size()) + 1;
      const std::string text = o_.ids ? join_ids(h.tokens) : h.text;
      if (o_.n_best > 1)
        out_.printf("%zu ||| %s ||| %.6f ||| %.6f\n", index, text.c_str(), h.log_prob, h.score);
      else
        out_.write(text + "\n");  // whole: a drawn token may decode to a NUL byte
    }
    if (attention_ && !translations.empty()) attention_->add(index, translations[0]);
  }

  const TranslateOptions& o_;
  OutputFile& out_;
  AttentionFiles* attention_;
  std::map<size_t, std::vector<api::Translation>> waiting_;  // done, but an earlier sentence is not
  size_t next_ = 0;                                          // the first sentence not yet written
  int64_t output_tokens_ = 0;
};

api::TranslationOptions translation_options(const TranslateOptions& o) {
  api::TranslationOptions to;
  to.search.beam_size = beam_size(o);
  to.search.n_best = o.n_best;
  to.search.do_sample = o.sample;
  to.search.sampling.temperature = o.temperature;
  to.search.sampling.top_k = o.top_k;
  to.search.sampling.top_p = o.top_p;
  to.search.seed = o.seed;
  to.search.min_length = o.min_length;
  to.search.constraints.repetition_penalty = o.repetition_penalty;
  to.search.constraints.no_repeat_ngram_size = o.no_repeat_ngram_size;
  to.search.length_penalty = o.length_penalty;
  to.search.max_length_ratio = o.max_length_ratio;
  to.search.max_length_offset = o.max_length_offset;
  to.search.attention = !o.attention_out.empty();
  to.batch_size = o.batch_size;
  to.sort_window = o.batch_size * kBatchesPerSortWindow;
  to.truncate = o.too_long == "truncate";
  to.source_lang = o.source_lang;
  to.target_lang = o.target_lang;
  return to;
}

int run_translate(const TranslateOptions& o) {
  // Everything that can fail without the model fails before it loads.
  check_search_flags(o, std::numeric_limits<int64_t>::max());
  check_checkpoint_argument(o.checkpoint);
  check_output_is_no_input(o.output, {{"--input", o.input}});
  OutputFile out(o.output);
  if (!o.attention_out.empty()) make_attention_dir(o.attention_out);
  set_num_threads(o.threads);
  const api::Translator translator(o.checkpoint, chosen_compute_type(o.compute), chosen_device(o.compute.device));
  check_search_flags(o, translator.config().tgt_vocab_size);
  QKV_CHECK(o.ids || translator.has_tokenizers(),
            o.checkpoint << ": no tokenizer (source.spm.model / target.spm.model, or an imported model's "
                             "source.spm, target.spm and vocab.json) for text input; use --ids for token ids");
  const api::TranslationOptions to = translation_options(o);
  check_languages(o, translator);
  const std::vector<data::IdLine> sources = read_sources(o, translator, to);

  std::unique_ptr<AttentionFiles> attention =
      o.attention_out.empty() ? nullptr : std::make_unique<AttentionFiles>(o, translator, sources);
  InOrderWriter writer(o, out, attention.get());
  ProgressLine progress("translated", "sentences", o.quiet);
  const bool output_on_terminal = out.is_stdout() && ::isatty(STDOUT_FILENO);
  int64_t done = 0;
  translator.translate_ids_each(
      sources, to, [&](size_t i, std::vector<api::Translation>&& found) { writer.add(i, std::move(found)); },
      [&](int64_t finished, int64_t total) {
        if (output_on_terminal) progress.clear();  // no translation written after a half line
        writer.write_ready();
        done = finished;
        progress.update(finished, total);
      });
  writer.write_ready();  // empty sources after the last batch, or an input of empty lines alone
  QKV_CHECK(writer.all_written(sources.size()), "qkv translate: not every sentence was translated");
  out.close();
  progress.finish();
  const double t = progress.seconds();
  const int64_t out_tokens = writer.output_tokens();
  if (!o.quiet)
    std::fprintf(stderr, "qkv translate: %lld sentences, %lld output tokens in %s (%.1f sentences/s, %.0f tokens/s), beam %d\n",
                 static_cast<long long>(done), static_cast<long long>(out_tokens), format_duration(t).c_str(), done / t,
                 out_tokens / t, beam_size(o));
  if (attention) attention->draw();
  return 0;
}
}  // namespace

Runner add_translate_command(CLI::App& app) {
  auto o = std::make_shared<TranslateOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Checkpoint directory")->required();
  app.add_option("--input", o->input, "Source text, one sentence a line ('-' = stdin)")->capture_default_str();
  add_output_option(app, o->output, "Translations, one a line in input order (--num-hypotheses N: N lines each)");
  app.add_flag("--ids", o->ids, "Input and output are space-separated token ids (no tokenizer; a source line is taken as given)");
  o->beam_opt = app.add_option("--beam-size", o->beam, "Beam size (1 = greedy; at most the target vocabulary size)")
                    ->capture_default_str()
                    ->check(FiniteRange(1, decoding::kMaxBeamSize));
  app.add_option("--num-hypotheses", o->n_best, "Hypotheses per sentence (<= --beam-size): 'index ||| text ||| log-prob ||| score'")
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
  app.add_flag("--do-sample", o->sample, "Sample each token (one translation a sentence; beam 1) instead of beam search");
  add_sampling_flags(app, o.get(), "With --do-sample: the random stream (sentence i keyed by (seed, i))");
  app.add_option("--min-length", o->min_length,
                 "EOS is refused while the output, its decoder start counted, is shorter (transformers' min_length)")
      ->capture_default_str()
      ->check(FiniteRange(0, decoding::kMaxLengthOffset));
  add_repetition_flags(app, o.get(), "the output");
  app.add_option("--batch-size", o->batch_size, "Sentences decoded together")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--too-long", o->too_long, "Sources longer than max_seq_length: truncate (with a warning) or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"truncate", "error"}));
  app.add_option("--source-lang", o->source_lang,
                 "Multilingual models (M2M100, NLLB, mBART): the sources' language as the tokenizer names it "
                 "(en, eng_Latn, en_XX; default: its src_lang)");
  app.add_option("--target-lang", o->target_lang,
                 "Multilingual models: the language to translate into, whose code search makes the first target token "
                 "(fr, fra_Latn, fr_XX; default: the model's forced_bos_token_id)");
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_compute_type_options(app, o->compute);
  add_quiet_flag(app, o->quiet, "No progress, summary, warnings or notes on stderr (errors still)");
  app.add_option("--attention-out", o->attention_out,
                 "Write each sentence's attention weights (DIR/NNNN.npz, the best hypothesis) and heatmaps of its "
                 "cross-attention (DIR/NNNN-cross-layerL.png; needs python3-matplotlib)");
  return [o]() { return run_translate(*o); };
}

}  // namespace qkv::cli
