// Which SentencePiece vocabulary size for a parallel corpus? For each candidate size this trains a
// joint model on the training text and measures what the size changes:
//   - sequence lengths (mean source/target tokens, 99th percentile, pairs over --max-len),
//   - the training cost of one epoch for the given model shape (matmul FLOPs: the embedding-free
//     layers scale with the token count, the output projection with tokens x vocabulary, attention
//     with the squared lengths), relative to the first size,
//   - how well the dev side is covered: the share of dev target tokens whose piece occurs fewer
//     than 20 times in the training target (embeddings and output rows that get few updates).
//
// Usage: bench_vocab --src train.es --tgt train.en --dev-tgt dev.en [--sizes 2000,4000,8000,16000]
//                    [--d-model 256 --layers 4 --d-ff 1024 --max-len 160] [--threads 2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/utf8.h"

namespace {

struct Args {
  std::string src, tgt, dev_tgt;
  std::vector<int> sizes = {2000, 4000, 8000, 16000};
  double d_model = 256, layers = 4, d_ff = 1024;
  int64_t max_len = 160;
  int threads = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    QKV_CHECK(i + 1 < argc, k << ": missing value");
    const std::string v = argv[++i];
    if (k == "--src") a.src = v;
    else if (k == "--tgt") a.tgt = v;
    else if (k == "--dev-tgt") a.dev_tgt = v;
    else if (k == "--d-model") a.d_model = std::stod(v);
    else if (k == "--layers") a.layers = std::stod(v);
    else if (k == "--d-ff") a.d_ff = std::stod(v);
    else if (k == "--max-len") a.max_len = std::stoll(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--sizes") {
      a.sizes.clear();
      std::istringstream in(v);
      std::string s;
      while (std::getline(in, s, ',')) a.sizes.push_back(std::stoi(s));
    } else
      QKV_CHECK(false, "unknown option " << k);
  }
  QKV_CHECK(!a.sizes.empty(), "--sizes: no vocabulary size given");
  QKV_CHECK(!a.src.empty() && !a.tgt.empty() && !a.dev_tgt.empty(), "usage: bench_vocab --src F --tgt F --dev-tgt F [--sizes 2000,8000]");
  return a;
}

// Matmul FLOPs of one training step on a pair (forward x 3 for forward + backward), without the
// embedding lookups. Encoder layer per token: Q,K,V,O (4 d^2) + FFN (2 d d_ff) multiply-adds, plus
// attention 2 S d per token; decoder: self + cross projections (8 d^2) + FFN, attention 2 (T + S) d.
double pair_flops(const Args& a, double s, double t, double vocab) {
  const double d = a.d_model;
  const double enc = s * (4 * d * d + 2 * d * a.d_ff + 2 * s * d);
  const double dec = t * (8 * d * d + 2 * d * a.d_ff + 2 * (t + s) * d);
  return 3 * 2 * (a.layers * (enc + dec) + t * d * vocab);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv;
  try {
    const Args a = parse(argc, argv);
    const auto src = text::read_text_lines(a.src), tgt = text::read_text_lines(a.tgt), dev = text::read_text_lines(a.dev_tgt);
    QKV_CHECK(src.size() == tgt.size(), a.src << " has " << src.size() << " lines but " << a.tgt << " has " << tgt.size());
    const std::string dir = std::filesystem::temp_directory_path() / ("qkv_bench_vocab_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    struct RemoveDir {  // also when a size fails
      std::string path;
      ~RemoveDir() { std::error_code ec; std::filesystem::remove_all(path, ec); }
    } remove_dir{dir};
    std::printf("%zu training pairs, %zu dev targets; model d_model %.0f, %.0f+%.0f layers, d_ff %.0f; max-len %lld\n",
                src.size(), dev.size(), a.d_model, a.layers, a.layers, a.d_ff, static_cast<long long>(a.max_len));
    std::printf("%7s %9s %9s %8s %9s %12s %11s %14s\n", "vocab", "src mean", "tgt mean", "tgt p99", "over max",
                "epoch TFLOP", "epoch cost", "dev rare tok");
    double first_cost = 0;
    for (const int v : a.sizes) {
      text::SpmTrainOptions so;
      so.vocab_size = v;
      so.num_threads = a.threads;
      const std::string prefix = dir + "/spm" + std::to_string(v);
      train_sentencepiece({a.src, a.tgt}, prefix, so);
      const text::SentencePiece spm(prefix + ".model");
      double src_tokens = 0, tgt_tokens = 0, flops = 0;
      int64_t over = 0;
      std::vector<size_t> tgt_len;
      std::map<int32_t, int64_t> tgt_count;
      for (size_t i = 0; i < src.size(); ++i) {
        const double s = static_cast<double>(spm.encode(src[i]).size()) + 1;  // + EOS
        const auto t_ids = spm.encode(tgt[i]);
        const double t = static_cast<double>(t_ids.size()) + 1;                // BOS .. / .. EOS
        for (int32_t id : t_ids) ++tgt_count[id];
        src_tokens += s;
        tgt_tokens += t;
        tgt_len.push_back(t_ids.size());
        if (s > static_cast<double>(a.max_len) || t > static_cast<double>(a.max_len)) ++over;
        flops += pair_flops(a, s, t, v);
      }
      std::sort(tgt_len.begin(), tgt_len.end());
      int64_t dev_tokens = 0, dev_rare = 0;
      for (const auto& line : dev)
        for (int32_t id : spm.encode(line)) {
          ++dev_tokens;
          const auto it = tgt_count.find(id);
          if (it == tgt_count.end() || it->second < 20) ++dev_rare;
        }
      if (first_cost == 0) first_cost = flops;
      const double n = static_cast<double>(src.size());
      std::printf("%7d %9.1f %9.1f %8zu %9lld %12.0f %10.2fx %13.2f%%\n", v, src_tokens / n, tgt_tokens / n,
                  tgt_len[tgt_len.size() * 99 / 100], static_cast<long long>(over), flops / 1e12, flops / first_cost,
                  100.0 * static_cast<double>(dev_rare) / static_cast<double>(std::max<int64_t>(dev_tokens, 1)));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vocab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
