// qkv embed --checkpoint DIR [--input FILE] [-o FILE.npy] [--batch-size N] [--ids]
//
// One sentence embedding per input line from an encoder-only model, as sentence-transformers
// computes it (models/sentence_embedding.h): [CLS] tokens [SEP], cut at the checkpoint's
// max_seq_length, pooled and normalised as its sentence_embedding.json says. Output: one JSON array
// per line on stdout, or a float32 (lines, d_model) .npy file with -o/--output. An empty line is embedded
// too ([CLS] [SEP]), so output row i is always input line i.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "qkv/cli/commands.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/encoder_cli.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/io/npy.h"

namespace qkv::cli {

namespace {
struct EmbedCliOptions {
  EncoderTextOptions text;
  std::string out;
  int threads = 0;
  bool quiet = false;
};

void print_json_lines(const Tensor& e) {
  const int64_t N = e.size(0), D = e.size(1);
  std::string line;
  char buf[32];
  for (int64_t n = 0; n < N; ++n) {
    line = "[";
    for (int64_t d = 0; d < D; ++d) {
      std::snprintf(buf, sizeof buf, "%s%.9g", d ? ", " : "", static_cast<double>(e.f32()[n * D + d]));
      line += buf;
    }
    line += "]\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
}
}  // namespace

Runner add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedCliOptions>();
  add_encoder_text_options(app, o->text, "Sentences, one a line ('-' = stdin)");
  app.add_option("-o,--output", o->out, "Write a float32 .npy matrix (lines, d_model) instead of JSON lines on stdout ('-')");
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_quiet_flag(app, o->quiet, "No progress, summary or notes on stderr (errors still)");
  return [o]() {
    set_num_threads(o->threads);
    const auto start = std::chrono::steady_clock::now();
    const auto session_ptr = open_encoder(o->text, "embedding");
    const EncoderSession& session = *session_ptr;
    const std::vector<std::vector<int32_t>> ids = read_encoder_lines(session, o->text);
    ProgressLine progress("embedded", "sentences", o->quiet);
    const auto total = static_cast<int64_t>(ids.size());
    const Tensor e = session.embed_ids(ids, o->text.batch_size, [&](int64_t done) { progress.update(done, total); });
    progress.finish();
    if (o->out.empty() || o->out == "-") {
      print_json_lines(e);
      return 0;
    }
    io::write_npy(o->out, e);
    if (o->quiet) return 0;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "qkv: wrote %s: %lld embeddings of %lld floats (%s) in %.1f s\n", o->out.c_str(),
                 static_cast<long long>(e.size(0)), static_cast<long long>(e.size(1)),
                 models::describe(session.pooling()).c_str(), seconds);
    return 0;
  };
}

}  // namespace qkv::cli
