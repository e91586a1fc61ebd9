// qkv score --checkpoint DIR --src FILE --tgt FILE [--per-line] [--batch-size N]   (encoder-decoder)
// qkv score --checkpoint DIR --tgt FILE [--per-line] [--batch-size N]              (decoder-only)
// A decoder-only model scores each line alone: the sum over i of log p(id i+1 | ids 0..i).
// qkv score --checkpoint DIR --text FILE                                           (decoder-only)
// Held-out perplexity of raw text, read as training reads it: the lines tokenized with the
// checkpoint's tokenizer, packed with EOS between them, cut into blocks of the model's context,
// every token scored once.
// Results go to stdout or -o FILE.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/output_file.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/utf8.h"
#include "qkv/train/lm_data.h"
#include "qkv/train/step.h"

namespace qkv::cli {

namespace {
struct ScoreOptions {
  std::string checkpoint, src, tgt, text, output = "-";
  bool per_line = false;
  int64_t batch_size = 32;
  int threads = 0;
  bool quiet = false;
  ComputeTypeOption compute;
};

// train::score with a progress line on stderr ("scored 64/1000 lines, ..."), one update a batch.
train::ScoreResult score_with_progress(const models::Model& model, const std::vector<data::IdLine>& src,
                                       const std::vector<data::IdLine>& tgt, const ScoreOptions& o, const char* unit) {
  ProgressLine progress("scored", unit, o.quiet);
  const auto total = static_cast<int64_t>(tgt.size());
  int64_t done = 0;
  const train::ScoreResult r = train::score(model, src, tgt, o.batch_size, [&] {
    done = std::min(total, done + o.batch_size);
    progress.update(done, total);
  });
  progress.finish();
  return r;
}

void check_lengths(const std::vector<data::IdLine>& lines, const std::string& path, int64_t max_len, int64_t min_len,
                   int64_t extra) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const int64_t n = static_cast<int64_t>(lines[i].size());
    QKV_CHECK(n >= min_len, path << ":" << i + 1 << ": needs at least " << min_len << " ids, got " << n);
    QKV_CHECK(n - extra <= max_len, path << ":" << i + 1 << ": " << n << " ids exceed the model's max_seq_length "
                                         << max_len << (extra ? " (+1: the target's last id is only a label)" : ""));
  }
}

int score_text(const models::Model& model, const ScoreOptions& o, OutputFile& out) {
  if (!model.config().decoder_only())
    throw UsageError("--text: " + o.checkpoint + " is an encoder-decoder model; score id pairs with --src and --tgt");
  if (!o.src.empty()) throw UsageError("--src: --text scores a language model's text alone");
  const std::string path = models::lm_tokenizer_path(o.checkpoint);
  QKV_CHECK(!path.empty(), o.checkpoint << ": no tokenizer (" << models::kLmSpmFile << " or " << models::kLmBpeFile
                                        << ") to read --text with");
  const std::unique_ptr<text::Tokenizer> tokenizer = text::load_tokenizer(path);
  std::vector<data::IdLine> lines;
  int64_t chars = 0;
  for (const std::string& line : text::read_text_lines(o.text)) {
    if (line.empty()) continue;
    chars += static_cast<int64_t>(line.size());
    lines.push_back(tokenizer->encode(line));
  }
  QKV_CHECK(!lines.empty(), o.text << ": no text to score");
  const auto& c = model.config();
  const std::vector<data::IdLine> blocks =
      train::cut_blocks(train::pack_lines(lines, c.bos_id, c.eos_id), c.max_seq_length, true);
  const train::ScoreResult r = score_with_progress(model, {}, blocks, o, "blocks");
  out.printf("tokens %lld\nloss %.7f\nperplexity %.4f\n", static_cast<long long>(r.tokens), r.mean_loss(),
             std::exp(r.mean_loss()));
  out.close();
  return 0;
}
}  // namespace

Runner add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Checkpoint directory")->required();
  app.add_option("--src", o->src, "Source ids, one sentence a line (encoder-decoder models only)");
  auto* tgt = app.add_option("--tgt", o->tgt, "Target ids, one sentence a line (input = tgt[:-1], label = tgt[1:])");
  app.add_option("--text", o->text, "Decoder-only: raw text whose held-out loss and perplexity to report")
      ->excludes(tgt);
  app.add_flag("--per-line", o->per_line, "Also print each line's sum of label log-probabilities");
  app.add_option("--batch-size", o->batch_size, "Sentences per batch (padded with the pad id)")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_compute_type_options(app, o->compute);
  add_output_option(app, o->output, "Where the per-line sums and the loss go");
  add_quiet_flag(app, o->quiet, "No progress or notes on stderr (errors still)");
  return [o]() {
    check_checkpoint_argument(o->checkpoint);
    check_output_is_no_input(o->output, {{"--src", o->src}, {"--tgt", o->tgt}, {"--text", o->text}});
    OutputFile out(o->output);  // before the model loads: a path that cannot be written fails at once
    set_num_threads(o->threads);
    auto model = models::load_model(o->checkpoint);
    model->eval();
    model->to(chosen_device(o->compute.device));
    model->set_compute_type(chosen_compute_type(o->compute));
    const auto& c = model->config();
    QKV_CHECK(!c.encoder_only(), o->checkpoint << ": this is an encoder-only model; qkv score gives the loss of a "
                                                  "language or translation model (see qkv embed and qkv classify)");
    if (!o->text.empty()) return score_text(*model, *o, out);
    if (o->tgt.empty()) throw UsageError("--tgt FILE (ids) is required, or --text FILE for a decoder-only model");
    if (c.decoder_only() && !o->src.empty())
      throw UsageError("--src: " + o->checkpoint + " is a decoder-only model, which scores --tgt lines alone");
    if (!c.decoder_only() && o->src.empty())
      throw UsageError("--src is required: " + o->checkpoint + " is an encoder-decoder model");
    std::vector<data::IdLine> src;
    if (!c.decoder_only()) src = data::read_id_lines(o->src, c.src_vocab_size);
    const auto tgt = data::read_id_lines(o->tgt, c.tgt_vocab_size);
    QKV_CHECK(c.decoder_only() || src.size() == tgt.size(),
              o->src << " has " << src.size() << " lines but " << o->tgt << " has " << tgt.size());
    if (!c.decoder_only()) check_lengths(src, o->src, c.max_seq_length, 1, 0);
    check_lengths(tgt, o->tgt, c.max_seq_length, 2, 1);
    const train::ScoreResult r = score_with_progress(*model, src, tgt, *o, "lines");
    if (o->per_line)
      for (double lp : r.line_log_prob) out.printf("%.6f\n", lp);
    out.printf("loss %.7f\n", r.mean_loss());
    if (c.decoder_only()) out.printf("perplexity %.4f\n", std::exp(r.mean_loss()));
    out.close();
    return 0;
  };
}

}  // namespace qkv::cli
