// qkv classify --checkpoint DIR [--input FILE] [-o FILE] [--batch-size N] [--top-k K] [--too-long truncate|error] [--ids]
//
// The label of each input line under an encoder-only checkpoint with a classification head (one
// trained by `qkv train --arch encoder-only --objective classify`): one output line per input
// line, in order, "label<TAB>probability", or with --top-k K the K most probable labels as
// "label<TAB>probability" pairs on one line, most probable first (equal probabilities: the label
// listed first in config.json). Sentences are read as `qkv embed` reads them ([CLS] tokens [SEP],
// cut at the model's positions or refused with --too-long error). Lines go to stdout or -o FILE
// 16 batches at a time (each group sorted by length), flushed as they are done, with progress on
// stderr.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>

#include "qkv/cli/commands.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/encoder_cli.h"
#include "qkv/cli/output_file.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/train/encoder_eval.h"

namespace qkv::cli {

namespace {
struct ClassifyCliOptions {
  EncoderTextOptions text;
  int64_t top = 1;
  int threads = 0;
  std::string output = "-";
  bool quiet = false;
};

// Sentences classified, written and flushed together: 16 batches, as `qkv translate` sorts them.
constexpr int64_t kBatchesPerWrite = 16;

void write_predictions(const Tensor& p, const std::vector<std::string>& labels, int64_t top, OutputFile& out) {
  const int64_t N = p.size(0), L = p.size(1), K = std::min(top, L);
  std::vector<int64_t> order(static_cast<size_t>(L));
  std::string line;
  char prob[32];
  for (int64_t n = 0; n < N; ++n) {
    const float* row = p.f32() + n * L;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    line.clear();
    for (int64_t k = 0; k < K; ++k) {
      std::snprintf(prob, sizeof prob, "\t%.4f", static_cast<double>(row[order[static_cast<size_t>(k)]]));
      line += (k ? "\t" : "") + labels[static_cast<size_t>(order[static_cast<size_t>(k)])] + prob;
    }
    line += '\n';
    out.write(line);
  }
}

int run_classify(const ClassifyCliOptions& o) {
  set_num_threads(o.threads);
  check_output_is_no_input(o.output, {{"--input", o.text.input}});
  OutputFile out(o.output);  // before the model loads: a path that cannot be written fails at once
  const auto session_ptr = open_encoder(o.text, "classification");
  const EncoderSession& session = *session_ptr;
  const std::vector<std::string>& labels = session.model().config().labels;
  QKV_CHECK(!labels.empty(), o.text.checkpoint << ": the model has no classification head (config.json \"labels\" is "
                                                  "empty); train one with qkv train --objective classify");
  const std::vector<std::vector<int32_t>> ids = read_encoder_lines(session, o.text);
  ProgressLine progress("classified", "sentences", o.quiet);
  const auto total = static_cast<int64_t>(ids.size());
  const int64_t step = o.text.batch_size * kBatchesPerWrite;
  for (int64_t first = 0; first < total; first += step) {
    const int64_t last = std::min(total, first + step);
    const std::vector<std::vector<int32_t>> group(ids.begin() + first, ids.begin() + last);
    write_predictions(session.classify_ids(group, o.text.batch_size), labels, o.top, out);
    out.flush();
    progress.update(last, total);
  }
  out.close();
  progress.finish();
  return 0;
}
}  // namespace

Runner add_classify_command(CLI::App& app) {
  auto o = std::make_shared<ClassifyCliOptions>();
  add_encoder_text_options(app, o->text, "Sentences, one a line ('-' = stdin)");
  app.add_option("--top-k", o->top, "Print the K most probable labels of each line (label<TAB>probability pairs)")
      ->capture_default_str()
      ->check(FiniteRange(1, 100000));
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_output_option(app, o->output, "Predictions, one line per input line");
  add_quiet_flag(app, o->quiet, "No progress or notes on stderr (errors still)");
  return [o]() { return run_classify(*o); };
}

}  // namespace qkv::cli
