// qkv classify --checkpoint DIR [--input FILE] [--batch-size N] [--top K] [--too-long truncate|error] [--ids]
//
// The label of each input line under an encoder-only checkpoint with a classification head (one
// trained by `qkv train --arch encoder-only --objective classify`): one output line per input
// line, in order, "label<TAB>probability", or with --top K the K most probable labels as
// "label<TAB>probability" pairs on one line, most probable first (equal probabilities: the label
// listed first in config.json). Sentences are read as `qkv embed` reads them ([CLS] tokens [SEP],
// cut at the model's positions or refused with --too-long error).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>

#include "qkv/cli/commands.h"
#include "qkv/cli/encoder_cli.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/train/encoder_eval.h"

namespace qkv::cli {

namespace {
struct ClassifyCliOptions {
  EncoderTextOptions text;
  int64_t top = 1;
  int threads = 0;
};

void print_predictions(const Tensor& p, const std::vector<std::string>& labels, int64_t top) {
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
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
}
}  // namespace

Runner add_classify_command(CLI::App& app) {
  auto o = std::make_shared<ClassifyCliOptions>();
  add_encoder_text_options(app, o->text, "Sentences, one a line ('-' = stdin)");
  app.add_option("--top", o->top, "Print the K most probable labels of each line (label<TAB>probability pairs)")
      ->capture_default_str()
      ->check(FiniteRange(1, 100000));
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  return [o]() {
    set_num_threads(o->threads);
    const auto session_ptr = open_encoder(o->text, "classification");
    const EncoderSession& session = *session_ptr;
    const std::vector<std::string>& labels = session.model().config().labels;
    QKV_CHECK(!labels.empty(), o->text.checkpoint << ": the model has no classification head (config.json \"labels\" is "
                                                     "empty); train one with qkv train --objective classify");
    const std::vector<std::vector<int32_t>> ids = read_encoder_lines(session, o->text);
    if (ids.empty()) return 0;
    print_predictions(session.classify_ids(ids, o->text.batch_size), labels, o->top);
    return 0;
  };
}

}  // namespace qkv::cli
