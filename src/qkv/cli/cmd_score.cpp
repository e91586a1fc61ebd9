// qkv score --checkpoint DIR --src FILE --tgt FILE [--per-line] [--batch-size N]   (encoder-decoder)
// qkv score --checkpoint DIR --tgt FILE [--per-line] [--batch-size N]              (decoder-only)
// A decoder-only model scores each line alone: the sum over i of log p(id i+1 | ids 0..i).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv::cli {

namespace {
struct ScoreOptions {
  std::string checkpoint, src, tgt;
  bool per_line = false;
  int64_t batch_size = 32;
  int threads = 0;
};

void check_lengths(const std::vector<data::IdLine>& lines, const std::string& path, int64_t max_len, int64_t min_len,
                   int64_t extra) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const int64_t n = static_cast<int64_t>(lines[i].size());
    QKV_CHECK(n >= min_len, path << ":" << i + 1 << ": needs at least " << min_len << " ids, got " << n);
    QKV_CHECK(n - extra <= max_len, path << ":" << i + 1 << ": " << n << " ids exceed the model's max_seq_length "
                                         << max_len << (extra ? " (+1: the target's last id is only a label)" : ""));
  }
}
}  // namespace

Runner add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Checkpoint directory")->required();
  app.add_option("--src", o->src, "Source ids, one sentence a line (encoder-decoder models only)");
  app.add_option("--tgt", o->tgt, "Target ids, one sentence a line (input = tgt[:-1], label = tgt[1:])")->required();
  app.add_flag("--per-line", o->per_line, "Also print each line's sum of label log-probabilities");
  app.add_option("--batch-size", o->batch_size, "Sentences per batch (padded with the pad id)")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  return [o]() {
    check_checkpoint_argument(o->checkpoint);
    set_num_threads(o->threads);
    auto model = models::load_model(o->checkpoint);
    model->eval();
    const auto& c = model->config();
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
    const train::ScoreResult r = train::score(*model, src, tgt, o->batch_size);
    if (o->per_line)
      for (double lp : r.line_log_prob) std::printf("%.6f\n", lp);
    std::printf("loss %.7f\n", r.mean_loss());
    if (c.decoder_only()) std::printf("perplexity %.4f\n", std::exp(r.mean_loss()));
    return 0;
  };
}

}  // namespace qkv::cli
