// qkv similar --checkpoint DIR --corpus FILE --query TEXT [--query TEXT ...] [--top-k K]
//
// Semantic search: the corpus lines most similar to each query by the cosine of their sentence
// embeddings (`qkv embed`'s). The corpus embeddings are cached next to the corpus, in
// FILE.qkv-embeddings.npy with FILE.qkv-embeddings.json saying what they were computed from (the
// CRC-32 of the corpus and of the model's weights, the pooling and the token limit): a later search
// with the same corpus and model reads them instead of embedding the corpus again, and any change
// recomputes them. Output per query: a "# query" line, then K lines of "rank<TAB>score<TAB>line<TAB>text".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "qkv/cli/commands.h"
#include "qkv/cli/encoder_cli.h"
#include "qkv/cli/progress.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/io/npy.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct SimilarCliOptions {
  EncoderTextOptions text;
  std::string corpus;
  std::vector<std::string> queries;
  int64_t top = 5;
  bool no_cache = false;
  int threads = 0;
  bool quiet = false;
};

// What the cached embeddings were computed from; a cache whose key differs is recomputed.
json cache_key(const SimilarCliOptions& o, const EncoderSession& s) {
  return {{"corpus_crc32", io::file_crc32(o.corpus)},
          {"corpus_bytes", fs::file_size(o.corpus)},
          {"weights_crc32", io::file_crc32(o.text.checkpoint + "/model.safetensors")},
          {"pooling", s.pooling().pooling},
          {"normalize", s.pooling().normalize},
          {"max_tokens", s.pooling().max_seq_length},
          {"too_long", o.text.too_long},
          {"ids", o.text.ids},
          {"compute_type", nn::compute_type_name(s.compute_type())}};
}

// The corpus embeddings (lines, D), from the cache when its key matches.
Tensor corpus_embeddings(const SimilarCliOptions& o, const EncoderSession& s, int64_t lines) {
  const std::string npy = o.corpus + ".qkv-embeddings.npy", meta = o.corpus + ".qkv-embeddings.json";
  const json key = cache_key(o, s);
  std::error_code ec;
  if (!o.no_cache && fs::exists(npy, ec) && fs::exists(meta, ec)) {
    try {
      std::ifstream in(meta);
      if (json::parse(in) == key) {
        Tensor cached = io::read_npy(npy);
        if (cached.dim() == 2 && cached.size(0) == lines && cached.size(1) == s.model().config().d_model) return cached;
      }
    } catch (const std::exception&) {
      // A damaged cache is recomputed, never trusted.
    }
  }
  const std::vector<std::vector<int32_t>> ids = read_encoder_lines(s, o.text, o.corpus);
  ProgressLine progress("embedded", "corpus lines", o.quiet);  // a large corpus takes a while, once
  const Tensor e = s.embed_ids(ids, o.text.batch_size,
                               [&](int64_t done) { progress.update(done, static_cast<int64_t>(ids.size())); });
  progress.finish();
  if (!o.no_cache) {
    // The embeddings first, then the key that vouches for them: a crash in between leaves a key
    // that does not match, never a key over stale embeddings.
    std::error_code ignored;
    fs::remove(meta, ignored);
    io::write_npy(npy, e);
    io::write_file_atomic(meta, key.dump(1) + "\n");
  }
  return e;
}

void print_matches(const Tensor& corpus, const Tensor& query, const std::vector<std::string>& lines, int64_t top) {
  const int64_t N = corpus.size(0), D = corpus.size(1);
  std::vector<double> scores(static_cast<size_t>(N));
  double qn = 0;
  for (int64_t d = 0; d < D; ++d) qn += static_cast<double>(query.f32()[d]) * query.f32()[d];
  for (int64_t n = 0; n < N; ++n) {
    double dot = 0, cn = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double c = corpus.f32()[n * D + d];
      dot += c * query.f32()[d], cn += c * c;
    }
    scores[static_cast<size_t>(n)] = dot / std::max(std::sqrt(cn * qn), 1e-12);
  }
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min(top, N);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)] ||
           (scores[static_cast<size_t>(a)] == scores[static_cast<size_t>(b)] && a < b);
  });
  for (int64_t r = 0; r < k; ++r) {
    const int64_t n = order[static_cast<size_t>(r)];
    std::printf("%lld\t%.4f\t%lld\t%s\n", static_cast<long long>(r + 1), scores[static_cast<size_t>(n)],
                static_cast<long long>(n + 1), lines[static_cast<size_t>(n)].c_str());
  }
}
}  // namespace

Runner add_similar_command(CLI::App& app) {
  auto o = std::make_shared<SimilarCliOptions>();
  add_encoder_text_options(app, o->text, "");
  app.add_option("--corpus", o->corpus, "Text file, one candidate a line")->required()->check(CLI::ExistingFile);
  app.add_option("--query", o->queries, "A query (repeat for several)")->required();
  app.add_option("--top-k", o->top, "Matches per query")->capture_default_str()->check(FiniteRange(1, 1e9));
  app.add_flag("--no-cache", o->no_cache, "Embed the corpus again and write no cache");
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, kMaxThreads));
  add_quiet_flag(app, o->quiet, "No progress or notes on stderr (errors still)");
  return [o]() {
    set_num_threads(o->threads);
    const auto session_ptr = open_encoder(o->text, "semantic search");
    const EncoderSession& session = *session_ptr;
    const std::vector<std::string> lines = text::read_text_lines(o->corpus);
    QKV_CHECK(!lines.empty(), o->corpus << ": no lines to search");
    const Tensor corpus = corpus_embeddings(*o, session, static_cast<int64_t>(lines.size()));
    std::vector<std::vector<int32_t>> queries;
    for (size_t i = 0; i < o->queries.size(); ++i)
      queries.push_back(encoder_line_ids(session, o->text, o->queries[i], "--query " + std::to_string(i + 1)));
    const Tensor q = session.embed_ids(queries, o->text.batch_size);
    for (size_t i = 0; i < o->queries.size(); ++i) {
      std::printf("# %s\n", o->queries[i].c_str());
      print_matches(corpus, q.narrow(0, static_cast<int64_t>(i), 1).contiguous(), lines, o->top);
    }
    return 0;
  };
}

}  // namespace qkv::cli
