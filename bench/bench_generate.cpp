// Greedy generation with the key/value cache in qkv and in Hugging Face transformers (PyTorch 2.x),
// in the same benchmark run: GPT-2 small's shape with random weights, a prompt of P tokens per row,
// exactly N new tokens per row, batches of 1 and 16. Prints tokens/s of each (median over reps after
// a warm-up), the ratio, and for batch 1 the memory-bandwidth bound: batch 1 reads every weight once
// per token, so tokens/s <= bandwidth / bytes read per token; the bandwidth is measured here (a
// read-only sweep and a STREAM triad over arrays of 1 GiB in all, on the same number of threads).
//
// Usage: bench_generate [--threads T] [--reps R] [--new-tokens N] [--prompt P] [--batches 1,16]
//                       [--layers L] [--d-model D] [--heads H] [--vocab V] [--context C]
//                       [--python PATH] [--no-hf] [--int8] [--bf16] [--bandwidth-mib M]
// Defaults: GPT-2 small (12 layers, d_model 768, 12 heads, d_ff 3072, vocabulary 50257, context 1024,
// learned positions, GELU tanh, tied output), prompt 16, 256 new tokens, 3 reps, 2 threads; the
// bandwidth is measured over M = 1024 MiB (a smaller M for a quick check: CTest's bench.generate).
// qkv's loop is the greedy one (decoding::generate without stopping at EOS): prefill, then one
// step per token, argmax of each row. The peer is `PYTHON bench/generate_hf.py --serve`:
// GPT2LMHeadModel(GPT2Config(...)).generate(do_sample=False, max_new_tokens=N, min_new_tokens=N),
// one process per batch size, its runs alternating with qkv's (bench_common.h, PeerProcess).
// Both sides read the same prompt ids: row r, position t holds (r * 7919 + t * 104729 + 12345) % V.
// --int8 adds a row for qkv with int8 products (`qkv generate --quantize int8`); its batch-1 bound
// counts the int8 weights (1 byte + a float scale per output channel) and the float cache.
// --bf16 adds a row for qkv's bf16 compute type (`--compute-type bf16`) and runs transformers under
// torch.autocast("cpu", dtype=torch.bfloat16), the peer's mixed precision, instead of float32.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qkv/autograd/graph.h"
#include "qkv/core/threads.h"
#include "qkv/models/causal_lm.h"
#include "bench_common.h"
#include "qkv/kernels/product_clock.h"

using namespace qkv;

namespace {
struct Args {
  int threads = 2, reps = 3;
  int64_t bandwidth_mib = 1024;
  int64_t new_tokens = 256, prompt = 16, layers = 12, d_model = 768, heads = 12, vocab = 50257, context = 1024;
  std::vector<int64_t> batches = {1, 16};
  bool hf = true, int8 = false, bf16 = false;
  std::string python = QKV_SOURCE_DIR "/build/bench-venv/bin/python";
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

using bench::median;

using bench::peak_rss_gb;

// Memory bandwidth on `threads` threads, best of 5 (as STREAM reports): a read-only sweep of 1 GiB
// (what a batch-1 decoding step does to the weights) and a triad a = b + s * c over 3 x 341 MiB
// (by default: `mib` sets the total); the bound uses the higher of the two.
struct Bandwidth {
  double read_gbs = 0, triad_gbs = 0;
  double best() const { return std::max(read_gbs, triad_gbs); }  // the bound uses the higher one
};
Bandwidth measure_bandwidth(int threads, int64_t mib) {
  const size_t n = (static_cast<size_t>(mib) << 20) / sizeof(float);
  std::vector<float> buf(n, 1.f);
  const auto parallel = [&](auto&& body) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { body(t); });
    for (auto& th : ts) th.join();
  };
  Bandwidth bw;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> partial(static_cast<size_t>(threads));
    const auto a = Clock::now();
    parallel([&](int t) {
      const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (size_t i = lo; i + 32 <= hi; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(&buf[i]));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(&buf[i + 8]));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(&buf[i + 16]));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(&buf[i + 24]));
      }
      alignas(32) float r[8];
      _mm256_store_ps(r, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
      partial[static_cast<size_t>(t)] = r[0] + r[1] + r[2] + r[3] + r[4] + r[5] + r[6] + r[7];
    });
    bw.read_gbs = std::max(bw.read_gbs, n * sizeof(float) / since(a) * 1e-9);
    for (float p : partial) sink = sink + p;
  }
  buf.clear();
  buf.shrink_to_fit();
  const size_t m = n / 3;
  std::vector<float> x(m, 0.f), y(m, 1.f), z(m, 2.f);
  for (int rep = 0; rep < 5; ++rep) {
    const auto a = Clock::now();
    parallel([&](int t) {
      const size_t lo = m * t / threads, hi = m * (t + 1) / threads;
      for (size_t i = lo; i < hi; ++i) x[i] = y[i] + 3.f * z[i];
    });
    bw.triad_gbs = std::max(bw.triad_gbs, 3.0 * m * sizeof(float) / since(a) * 1e-9);
  }
  sink = sink + x[m / 2];
  return bw;
}

std::vector<std::vector<int32_t>> prompts_of(int64_t rows, int64_t len, int64_t vocab) {
  std::vector<std::vector<int32_t>> p(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < len; ++t) p[static_cast<size_t>(r)].push_back(static_cast<int32_t>((r * 7919 + t * 104729 + 12345) % vocab));
  return p;
}

void argmax_rows(const Tensor& logits, std::vector<int32_t>& next) {  // logits (N, V), contiguous
  const int64_t N = logits.size(0), V = logits.size(1);
  next.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits.f32() + i * V;
    next[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(z, z + V) - z);  // lowest id among ties
  }
}

struct GenTiming {
  double total = 0, prefill = 0;
};
// Greedy generation of exactly `new_tokens` tokens per prompt in compute type `type` (prepared
// before the clock starts, as a loaded model is); returns the times of one run.
GenTiming generate_greedy(models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                          int64_t new_tokens, std::vector<std::vector<int32_t>>* out,
                          nn::ComputeType type = nn::ComputeType::Float32) {
  if (model.compute_type() != type) model.set_compute_type(type);
  NoGradGuard no_grad;
  const auto a = Clock::now();
  models::GenerationState state;
  std::vector<int32_t> next;
  argmax_rows(model.prefill(prompts, new_tokens, state, nullptr).value().contiguous(), next);
  GenTiming t;
  t.prefill = since(a);
  const int64_t N = static_cast<int64_t>(prompts.size());
  if (out) out->assign(prompts.size(), {});
  for (int64_t k = 0; k < new_tokens; ++k) {
    if (out)
      for (size_t r = 0; r < next.size(); ++r) (*out)[r].push_back(next[r]);
    if (k + 1 == new_tokens) break;  // the last token is never fed back
    argmax_rows(model.step(Tensor::from_ids(Dims{N}, next), state).value().contiguous(), next);
  }
  t.total = since(a);
  return t;
}
}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto str = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    auto num = [&] { const std::string s = str(); return s.empty() ? 0 : std::stoll(s); };
    if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--reps")) a.reps = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--new-tokens")) a.new_tokens = num();
    else if (!std::strcmp(argv[i], "--prompt")) a.prompt = num();
    else if (!std::strcmp(argv[i], "--layers")) a.layers = num();
    else if (!std::strcmp(argv[i], "--d-model")) a.d_model = num();
    else if (!std::strcmp(argv[i], "--heads")) a.heads = num();
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = num();
    else if (!std::strcmp(argv[i], "--context")) a.context = num();
    else if (!std::strcmp(argv[i], "--python")) a.python = str();
    else if (!std::strcmp(argv[i], "--no-hf")) a.hf = false;
    else if (!std::strcmp(argv[i], "--int8")) a.int8 = true;
    else if (!std::strcmp(argv[i], "--bf16")) a.bf16 = true;
    else if (!std::strcmp(argv[i], "--bandwidth-mib")) a.bandwidth_mib = num();
    else if (!std::strcmp(argv[i], "--batches")) {
      a.batches.clear();
      std::stringstream ss(str());
      for (std::string item; std::getline(ss, item, ',');) a.batches.push_back(std::stoll(item));
    } else { std::fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
  }
  if (a.reps < 1 || a.new_tokens < 1 || a.prompt < 1 || a.batches.empty() || a.prompt + a.new_tokens > a.context ||
      a.bandwidth_mib < 1 || a.threads < 1) {
    std::fprintf(stderr, "need --reps, --new-tokens, --prompt, --bandwidth-mib, --threads >= 1, batches, prompt + new "
                         "tokens <= context\n");
    return 2;
  }
  set_num_threads(a.threads);

  const Bandwidth bw = measure_bandwidth(a.threads, a.bandwidth_mib);

  models::TransformerConfig config = models::decoder_only_defaults();
  config.tgt_vocab_size = config.src_vocab_size = a.vocab;
  config.d_model = a.d_model;
  config.num_heads = a.heads;
  config.num_layers = a.layers;
  config.d_ff = 4 * a.d_model;
  config.max_seq_length = a.context;
  config.dropout = 0.f;
  config.bos_id = config.eos_id = static_cast<int32_t>(a.vocab - 1);  // GPT-2's <|endoftext|>
  models::CausalLM model(config, 0);
  model.eval();

  // Bytes read per token at batch 1: every parameter once (the tied matrix once, as lm_head; the
  // embedding tables only by a row, not counted), plus the cache's keys and values, averaged over
  // the new tokens' positions.
  std::set<const float*> seen;
  double params = 0, weight_bytes = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!seen.insert(p.value().f32()).second) continue;
    params += static_cast<double>(p.value().numel());
    if (name != "position_embedding.weight") weight_bytes += 4.0 * static_cast<double>(p.value().numel());
  }
  const double mean_len = a.prompt + (a.new_tokens - 1) / 2.0;
  const double kv_bytes = 2.0 * a.layers * mean_len * a.d_model * 4;
  const double bytes_per_token = weight_bytes + kv_bytes;

  std::printf("GPT-2 small shape: %lld layers, d_model %lld, %lld heads, d_ff %lld, vocab %lld, context %lld, learned "
              "positions, GELU tanh, tied output, random weights (%.1fM parameters); prompt %lld, %lld new tokens "
              "(greedy), %d threads\n",
              static_cast<long long>(a.layers), static_cast<long long>(a.d_model), static_cast<long long>(a.heads),
              static_cast<long long>(config.d_ff), static_cast<long long>(a.vocab), static_cast<long long>(a.context),
              params / 1e6, static_cast<long long>(a.prompt), static_cast<long long>(a.new_tokens), a.threads);
  std::printf("memory bandwidth (%d threads, best of 5 over %lld MiB): read %.1f GB/s, triad %.1f GB/s; batch 1 reads %.0f "
              "MB per token (weights %.0f MB + cache %.1f MB) -> at most %.1f tokens/s\n",
              a.threads, static_cast<long long>(a.bandwidth_mib), bw.read_gbs, bw.triad_gbs, bytes_per_token / 1e6,
              weight_bytes / 1e6, kv_bytes / 1e6, bw.best() * 1e9 / bytes_per_token);
  std::fflush(stdout);

  // int8 weights: a byte per weight and a float scale per output channel (every matrix is d_in x
  // d_out with d_out channels; biases, norms and the cache stay float).
  double int8_weight_bytes = 0;
  seen.clear();
  for (const auto& [name, p] : model.named_parameters()) {
    if (!seen.insert(p.value().f32()).second || name == "position_embedding.weight") continue;
    const double n = static_cast<double>(p.value().numel());
    int8_weight_bytes += p.value().dim() == 2 ? n + 4.0 * static_cast<double>(p.value().size(0)) : 4.0 * n;
  }
  const double int8_bytes_per_token = int8_weight_bytes + kv_bytes;

  // Per batch size: both sides warmed up, then qkv's run, qkv's int8 run (--int8) and
  // transformers' run in turn, --reps times (bench_common.h: PeerProcess, a fresh peer process per
  // batch size started with --serve), so a drift in the shared machine's speed reaches every side
  // alike; each side's median is printed.
  const double bound = bw.best() * 1e9 / bytes_per_token, int8_bound = bw.best() * 1e9 / int8_bytes_per_token;
  if (a.int8)
    std::printf("qkv int8 reads %.0f MB per token at batch 1 -> at most %.1f tokens/s\n", int8_bytes_per_token / 1e6,
                int8_bound);
  struct Side {
    std::vector<double> total, prefill, step, product_share;  // share: of total, in the GEMM kernels
  };
  std::map<int64_t, double> qkv_tps, int8_tps, bf16_tps, hf_tps;
  std::map<int64_t, std::vector<double>> qkv_totals, hf_totals;
  double hf_rss = 0;
  std::string hf_versions;
  const auto print_qkv = [&](const char* label, int64_t B, const Side& s, double bound_here) {
    const double tps = B * a.new_tokens / median(s.total);
    std::printf("%-8s batch %2lld: %.2f s (median of %d)  %.1f tokens/s  (prefill %.3f s, %.1f ms per step; matrix "
                "products %.0f%%)", label, static_cast<long long>(B), median(s.total), a.reps, tps, median(s.prefill),
                median(s.step) * 1e3, 100 * median(s.product_share));
    if (B == 1)
      std::printf("  = %.2f of the bandwidth bound (steps only: %.2f)", tps / bound_here, 1.0 / median(s.step) / bound_here);
    std::printf("\n");
    return tps;
  };
  kernels::product_clock::set_enabled(true);
  for (int64_t B : a.batches) {
    const auto prompts = prompts_of(B, a.prompt, a.vocab);
    const auto timed = [&](nn::ComputeType precision, Side& s) {
      std::vector<std::vector<int32_t>> out;
      kernels::product_clock::reset();
      const GenTiming t = generate_greedy(model, prompts, a.new_tokens, &out, precision);
      s.product_share.push_back(kernels::product_clock::seconds() / t.total);
      s.total.push_back(t.total);
      s.prefill.push_back(t.prefill);
      s.step.push_back((t.total - t.prefill) / std::max<int64_t>(1, a.new_tokens - 1));
    };
    const int64_t warm = std::min<int64_t>(a.new_tokens, 8);
    generate_greedy(model, prompts, warm, nullptr, nn::ComputeType::Float32);  // warm-ups
    if (a.int8) generate_greedy(model, prompts, warm, nullptr, nn::ComputeType::Int8);
    if (a.bf16) generate_greedy(model, prompts, warm, nullptr, nn::ComputeType::BF16);
    std::unique_ptr<bench::PeerProcess> hf;
    if (a.hf)
      hf = std::make_unique<bench::PeerProcess>(
          a.python + " " QKV_BENCH_DIR "/generate_hf.py --serve --threads " + std::to_string(a.threads) + " --reps " +
          std::to_string(a.reps) + " --new-tokens " + std::to_string(a.new_tokens) + " --prompt " +
          std::to_string(a.prompt) + " --batches " + std::to_string(B) + " --layers " + std::to_string(a.layers) +
          " --d-model " + std::to_string(a.d_model) + " --heads " + std::to_string(a.heads) + " --vocab " +
          std::to_string(a.vocab) + " --context " + std::to_string(a.context) + (a.bf16 ? " --autocast bf16" : ""));
    Side f32, i8, b16;
    std::vector<double> hf_seconds;
    for (int r = 0; r < a.reps; ++r) {
      timed(nn::ComputeType::Float32, f32);
      if (a.int8) {
        if (hf) bench::settle();
        timed(nn::ComputeType::Int8, i8);
      }
      if (a.bf16) {
        if (hf) bench::settle();
        timed(nn::ComputeType::BF16, b16);
      }
      if (!hf) continue;
      bench::settle();
      hf_seconds.push_back(hf->step().at("seconds").get<double>());
    }
    qkv_tps[B] = print_qkv("qkv", B, f32, bound);
    qkv_totals[B] = f32.total;
    if (a.int8) int8_tps[B] = print_qkv("qkv int8", B, i8, int8_bound);
    if (a.bf16) bf16_tps[B] = print_qkv("qkv bf16", B, b16, bw.best() * 1e9 / (weight_bytes / 2 + kv_bytes));
    if (hf) {
      const nlohmann::json j = hf->finish();
      hf_tps[B] = B * a.new_tokens / median(hf_seconds);
      hf_totals[B] = hf_seconds;
      std::printf("hf       batch %2lld: %.2f s (median of %d, alternating with qkv's)  %.1f tokens/s%s",
                  static_cast<long long>(B), median(hf_seconds), a.reps, hf_tps[B], a.bf16 ? " (bf16 autocast)" : "");
      if (B == 1) std::printf("  = %.2f of the bandwidth bound", hf_tps[B] / bound);
      std::printf("\n");
      hf_rss = std::max(hf_rss, j.at("peak_rss_bytes").get<double>() / 1e9);
      hf_versions = "torch " + j.at("torch_version").get<std::string>() + ", transformers " +
                    j.at("transformers_version").get<std::string>();
    }
    std::fflush(stdout);
  }
  std::printf("qkv      peak RSS %.2f GB\n", peak_rss_gb());
  if (!a.hf) return 0;
  std::printf("hf       peak RSS %.2f GB (the largest of its processes, one per batch size)  (%s, %s)\n", hf_rss,
              hf_versions.c_str(), a.python.c_str());
  for (int64_t B : a.batches) {
    std::printf("ratio    batch %2lld: qkv is %.2fx faster", static_cast<long long>(B), qkv_tps.at(B) / hf_tps.at(B));
    if (a.int8) std::printf("; qkv int8 %.2fx", int8_tps.at(B) / hf_tps.at(B));
    if (a.bf16) std::printf("; qkv bf16 %.2fx", bf16_tps.at(B) / hf_tps.at(B));
    std::printf(" (against transformers' %s)", a.bf16 ? "bf16 autocast" : "float32");
    std::printf("; %s\n", bench::pair_ratios({qkv_totals.at(B), hf_totals.at(B), {}, {}}).c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_generate: %s\n", e.what());
  return 1;
}
