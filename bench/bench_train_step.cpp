// One training step of seed 000's configuration in qkv and in the seed's PyTorch model, in the same
// benchmark run: target tokens/s of each, the ratio, peak memory of each, and qkv's GFLOP/s against
// the SGEMM ceiling.
//
// Usage: bench_train_step [--steps N] [--threads T] [--layers L] [--batch B] [--len T] [--recompute-ffn] [--micro-batch ROWS] [--no-torch]
// PyTorch runs as `/usr/bin/python3 bench/seed_step_torch.py` (its own process, so peak RSS is its own).
#include <cblas.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "bench_common.h"
#include "qkv/core/threads.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/transformer.h"
#include "qkv/train/step.h"

using namespace qkv;

namespace {
struct Args {
  int steps = 3, threads = 2;
  int64_t layers = 6, batch = 64, len = 100;
  bool torch = true;
  bool recompute_ffn = false;
  int64_t micro_batch = 0;
};

double peak_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss * 1024.0 / 1e9;
}

// Matmul FLOPs of one training step (forward 2mnk, backward twice that): linears and attention.
double step_flops(const models::TransformerConfig& c, int64_t B, int64_t S, int64_t T) {
  const double D = c.d_model, F = c.d_ff, V = c.tgt_vocab_size, L = c.num_layers;
  const double src = B * S, tgt = B * T;
  double fwd = 0;
  fwd += L * (src * (4 * D * D + 2 * D * F) * 2 + 4.0 * B * S * S * D);                           // encoder
  fwd += L * (tgt * (4 * D * D + 2 * D * F) * 2 + 4.0 * B * T * T * D);                           // dec self + ffn
  fwd += L * (tgt * 2 * D * D * 2 + src * 2 * D * D * 2 + 4.0 * B * T * S * D);                   // cross-attn
  fwd += tgt * D * V * 2;                                                                          // output projection
  return 3 * fwd;
}

double sgemm_ceiling_gflops() {
  const int64_t M = 6400, N = 2048, K = 512;
  std::vector<float> a(M * K, 1.f), b(N * K, 1.f), c(M * N);
  const double t = bench::median_seconds(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
  });
  return 2.0 * M * N * K / t * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::stoll(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--steps")) a.steps = static_cast<int>(next());
    else if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(next());
    else if (!std::strcmp(argv[i], "--layers")) a.layers = next();
    else if (!std::strcmp(argv[i], "--batch")) a.batch = next();
    else if (!std::strcmp(argv[i], "--len")) a.len = next();
    else if (!std::strcmp(argv[i], "--no-torch")) a.torch = false;
    else if (!std::strcmp(argv[i], "--recompute-ffn")) a.recompute_ffn = true;
    else if (!std::strcmp(argv[i], "--micro-batch")) a.micro_batch = next();
    else { std::fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
  }
  set_num_threads(a.threads);
  models::TransformerConfig config;  // the seed's
  config.num_layers = a.layers;
  models::Transformer model(config, 0);
  model.train();
  model.set_recompute_ffn(a.recompute_ffn);
  train::Adam opt(model.named_parameters());
  const data::SyntheticBatch b = data::synthetic_batch("random", a.batch, a.len, config.tgt_vocab_size, 0, 0);
  int64_t tokens = 0;
  std::vector<double> times;
  const double t = bench::median_seconds(a.steps, [&] { tokens = train::train_step(model, opt, b.src, b.tgt, 0.f, a.micro_batch).target_tokens; });
  const double qkv_rss = peak_rss_gb();
  const PoolStats pool = BufferPool::stats();
  const double flops = step_flops(config, a.batch, a.len, a.len - 1);
  const double ceiling = sgemm_ceiling_gflops();
  std::printf("seed config: batch %lld x %lld, %lld layers, d_model 512, d_ff 2048, 8 heads, vocab 5000, dropout 0.1, %d threads%s%s\n",
              static_cast<long long>(a.batch), static_cast<long long>(a.len), static_cast<long long>(a.layers), a.threads,
              a.recompute_ffn ? ", qkv recomputes FFN activations" : "",
              a.micro_batch > 0 ? (", qkv accumulates gradients over micro-batches of " + std::to_string(a.micro_batch) + " rows").c_str() : "");
  std::printf("qkv     step %.2f s (median of %d)  %.0f target tokens/s  peak RSS %.2f GB (tensor pool peak %.2f GB)\n", t,
              a.steps, tokens / t, qkv_rss, pool.bytes_peak / 1e9);
  std::printf("qkv     %.0f GFLOP/s of matmul work = %.2f of the SGEMM ceiling (%.0f GFLOP/s measured now)\n",
              flops / t * 1e-9, flops / t * 1e-9 / ceiling, ceiling);
  std::fflush(stdout);
  if (!a.torch) return 0;
  const std::string cmd = "/usr/bin/python3 " QKV_BENCH_DIR "/seed_step_torch.py --steps " + std::to_string(a.steps) +
                          " --threads " + std::to_string(a.threads) + " --layers " + std::to_string(a.layers) +
                          " --batch " + std::to_string(a.batch) + " --len " + std::to_string(a.len);
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) { std::perror("popen"); return 1; }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  if (pclose(pipe) != 0) { std::fprintf(stderr, "PyTorch benchmark failed:\n%s\n", out.c_str()); return 1; }
  // The script prints one JSON object on its last line.
  std::string last_line = out;
  while (!last_line.empty() && last_line.back() == '\n') last_line.pop_back();
  last_line = last_line.substr(last_line.rfind('\n') == std::string::npos ? 0 : last_line.rfind('\n') + 1);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(last_line);
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "cannot parse the PyTorch benchmark's output (%s):\n%s\n", e.what(), out.c_str());
    return 1;
  }
  const double tt = j["median_step_seconds"].get<double>();
  const double trss = j["peak_rss_bytes"].get<double>() / 1e9;
  std::printf("pytorch step %.2f s (median of %d)  %.0f target tokens/s  peak RSS %.2f GB  (torch %s)\n", tt, a.steps,
              j["tokens_per_second"].get<double>(), trss, j["torch_version"].get<std::string>().c_str());
  std::printf("ratio   qkv is %.2fx faster, uses %.2f of PyTorch's memory\n", tt / t, qkv_rss / trss);
  return 0;
}
