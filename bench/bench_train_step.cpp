// One training step of seed 000's configuration (or the Bible model's, --preset bible) in qkv and in
// the seed's PyTorch model, in the same benchmark run: target tokens/s of each, the ratio, peak
// memory of each, and qkv's GFLOP/s against the SGEMM ceiling.
//
// Usage: bench_train_step [--preset seed|bible] [--steps N] [--threads T] [--layers L] [--batch B] [--len T]
//                         [--d-model D] [--heads H] [--d-ff F] [--vocab V] [--recompute-ffn]
//                         [--micro-batch ROWS] [--max-memory SIZE] [--python PATH] [--no-torch] [--products]
//                         [--precision float32|bf16] [--device cpu|cuda] [--attention seed|sdpa]
// --precision bf16: qkv's products in bf16 (ops/precision.h), PyTorch's step under
// torch.autocast("cpu" or "cuda", dtype=torch.bfloat16).
// --device cuda: both train on the GPU (scripts/gpu_check.sh runs it there; docs/gpu.md): qkv's model
// moved there (its batch stays on the host, as `qkv train`'s, and train_step copies it over each
// step), PyTorch's model and batch there. Each qkv step waits for the device at its end, as
// PyTorch's loss.item() after optimizer.step() (and its torch.cuda.synchronize()); both GPU peaks
// are printed. PyTorch keeps the seed's attention (matmul, masked_fill, softmax, matmul) on both
// devices, or with --attention sdpa runs F.scaled_dot_product_attention on the same masks (its fused
// attention: PyTorch's fastest CPU mode under autocast).
// --preset bible: bench/translate_bible.sh's model (d_model 256, 4 heads, 4 + 4 layers, d_ff 1024,
// vocabulary 4000) on a batch of 160 x 36 tokens (5760, like its --max-tokens 6000 batches of
// verses); flags after it override its values.
// qkv runs with `qkv train`'s defaults: the batch is chunked as --max-memory (default auto) chooses
// (train/memory_budget.h), unless --micro-batch is given; the estimate is printed beside the
// measured peak. PyTorch runs as `PATH bench/seed_step_torch.py --serve` in its own process (so peak
// RSS is its own), its steps alternating with qkv's (bench_common.h, PeerProcess); PATH defaults to
// build/bench-venv/bin/python (PyTorch 2.x, bench/setup_peers.sh) when it exists, else
// /usr/bin/python3. bench/ is $QKV_BENCH_DIR when set (a binary run from another copy, as on a GPU
// machine).
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include <filesystem>

#include "bench_common.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/core/threads.h"
#include "qkv/ops/precision.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/transformer.h"
#include "qkv/train/memory_budget.h"
#include "qkv/train/step.h"

using namespace qkv;

namespace {
struct Args {
  std::string preset = "seed";
  int steps = 3, threads = 2;
  int64_t layers = 6, batch = 64, len = 100;
  int64_t d_model = 512, heads = 8, d_ff = 2048, vocab = 5000;  // the seed's
  bool torch = true;
  bool products = false;  // --products: the step's products by shape (kernels/product_clock.h)
  bool recompute_ffn = false;
  std::string precision = "float32";
  std::string device = "cpu";  // cuda: qkv and PyTorch both train on the GPU
  std::string attention = "seed";  // PyTorch's: the seed's four operations, or sdpa
  int64_t micro_batch = 0;
  int64_t max_memory = train::kAutoMemory;  // qkv train's default
  std::string python = std::filesystem::exists(QKV_SOURCE_DIR "/build/bench-venv/bin/python")
                           ? QKV_SOURCE_DIR "/build/bench-venv/bin/python"
                           : "/usr/bin/python3";
};

using bench::peak_rss_gb;

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

}  // namespace

namespace {
// Returns false (after a message) on an unknown argument or a bad --max-memory.
bool parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    auto str = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    auto next = [&] { const std::string v = str(); return v.empty() ? 0 : std::stoll(v); };
    if (!std::strcmp(argv[i], "--preset")) {
      a.preset = str();
      if (a.preset == "bible") {
        a.d_model = 256, a.heads = 4, a.layers = 4, a.d_ff = 1024, a.vocab = 4000, a.batch = 160, a.len = 36;
      } else if (a.preset != "seed") {
        std::fprintf(stderr, "--preset: expected seed or bible, got '%s'\n", a.preset.c_str());
        return false;
      }
    } else if (!std::strcmp(argv[i], "--steps")) a.steps = static_cast<int>(next());
    else if (!std::strcmp(argv[i], "--d-model")) a.d_model = next();
    else if (!std::strcmp(argv[i], "--heads")) a.heads = next();
    else if (!std::strcmp(argv[i], "--d-ff")) a.d_ff = next();
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = next();
    else if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(next());
    else if (!std::strcmp(argv[i], "--layers")) a.layers = next();
    else if (!std::strcmp(argv[i], "--batch")) a.batch = next();
    else if (!std::strcmp(argv[i], "--len")) a.len = next();
    else if (!std::strcmp(argv[i], "--no-torch")) a.torch = false;
    else if (!std::strcmp(argv[i], "--products")) a.products = true;
    else if (!std::strcmp(argv[i], "--recompute-ffn")) a.recompute_ffn = true;
    else if (!std::strcmp(argv[i], "--micro-batch")) a.micro_batch = next();
    else if (!std::strcmp(argv[i], "--python")) a.python = str();
    else if (!std::strcmp(argv[i], "--precision")) a.precision = str();
    else if (!std::strcmp(argv[i], "--device")) a.device = str();
    else if (!std::strcmp(argv[i], "--attention")) {
      a.attention = str();
      if (a.attention != "seed" && a.attention != "sdpa") {
        std::fprintf(stderr, "--attention: expected seed or sdpa, got '%s'\n", a.attention.c_str());
        return false;
      }
    }
    else if (!std::strcmp(argv[i], "--max-memory")) {
      try {
        a.max_memory = train::parse_memory_size(str());
      } catch (const Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return false;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

// PyTorch's step in its own process, started with --serve: its steps alternate with qkv's.
std::string torch_command(const Args& a, Device device, bool bf16) {
  return a.python + " " + bench::bench_dir() + "/seed_step_torch.py --serve --steps " + std::to_string(a.steps) +
         " --threads " + std::to_string(a.threads) + " --layers " + std::to_string(a.layers) + " --batch " +
         std::to_string(a.batch) + " --len " + std::to_string(a.len) + " --d-model " + std::to_string(a.d_model) +
         " --heads " + std::to_string(a.heads) + " --d-ff " + std::to_string(a.d_ff) + " --vocab " +
         std::to_string(a.vocab) + " --max-len " + std::to_string(std::max<int64_t>(100, a.len)) +
         " --attention " + a.attention + bench::peer_device_flags(device, bf16);
}

// Prints PyTorch's line and the ratios.
void print_torch(const Args& a, Device device, double pool_peak_bytes, const bench::PairedTimes& times,
                 const nlohmann::json& last, double qkv_rss) {
  const double tt = bench::median(times.peer), t = bench::median(times.qkv);
  const double trss = last["peak_rss_bytes"].get<double>() / 1e9;
  std::printf("pytorch step %.*f s (median of %d, alternating with qkv's)  %.0f target tokens/s  peak RSS %.2f GB  "
              "(torch %s, attention %s%s, %s)\n",
              device.is_cuda() ? 4 : 2, tt, a.steps, last["target_tokens_per_step"].get<double>() / tt, trss,
              last["torch_version"].get<std::string>().c_str(), last.value("attention", "the seed's").c_str(),
              a.precision == "bf16" ? ", bf16 autocast" : "", a.python.c_str());
  bench::print_gpu_memory(device, pool_peak_bytes, last);
  std::printf("ratio   qkv is %.2fx faster, uses %.2f of PyTorch's %smemory; %s\n", tt / t, qkv_rss / trss,
              device.is_cuda() ? "peak host " : "", bench::pair_ratios(times).c_str());
}
}  // namespace

int main(int argc, char** argv) try {
  Args a;
  if (!parse_args(argc, argv, a)) return 2;
  if (a.steps < 1 || a.threads < 1 || a.batch < 1 || a.len < 2) {
    std::fprintf(stderr, "need --steps, --threads, --batch >= 1 and --len >= 2\n");
    return 2;
  }
  set_num_threads(a.threads);
  const ops::ProductPrecisionScope precision(ops::parse_precision(a.precision));
  const bool bf16 = ops::product_precision() == ops::Precision::BF16;
  bench::print_cpu_line(bf16);
  const Device device = bench::training_device(a.device);
  models::TransformerConfig config;  // the seed's, with the sizes given
  config.num_layers = a.layers;
  config.d_model = a.d_model;
  config.num_heads = a.heads;
  config.d_ff = a.d_ff;
  config.src_vocab_size = config.tgt_vocab_size = a.vocab;
  config.max_seq_length = std::max<int64_t>(100, a.len);
  config.validate();
  models::Transformer model(config, 0);
  model.train();
  model.set_recompute_ffn(a.recompute_ffn);
  model.to(device);  // the optimizer's moments follow the parameters
  train::Adam opt(model.named_parameters());
  const data::SyntheticBatch b = data::synthetic_batch("random", a.batch, a.len, config.tgt_vocab_size, 0, 0);
  // The chunking `qkv train` would choose for this batch (the same planner, the same budget).
  int64_t parameters = 0;
  for (const Var& p : model.parameters()) parameters += p.value().numel();
  const train::StepShape shape{a.batch, a.len, a.len - 1, a.batch * (a.len - 1), config.tgt_vocab_size};
  // On a GPU, --max-memory auto is a share of its memory, as `qkv train --device cuda` plans it.
  const int64_t max_memory =
      device.is_cuda() ? train::max_memory_on_gpu(a.max_memory, static_cast<int64_t>(cuda::memory_info(device).total))
                       : a.max_memory;
  const train::MicroBatchPlan plan = train::plan_micro_batches(config, parameters, a.recompute_ffn, shape, max_memory);
  const int64_t rows = a.micro_batch > 0 ? a.micro_batch : plan.rows;
  const train::MemoryEstimate estimate =
      train::estimate_step_memory(config, parameters, a.recompute_ffn, shape, rows > 0 ? rows : a.batch);
  int64_t tokens = 0;
  const auto step = [&] {
    tokens = train::train_step(model, opt, b.src, b.tgt, 0.f, rows).target_tokens;
    // On a GPU the backward and the update are still queued when train_step returns (it waited for
    // the loss only): a step is timed to its end, as PyTorch's loss.item() after optimizer.step().
    cuda::synchronize(device);
  };
  step();  // warm-up: fills the buffer pool
  std::unique_ptr<bench::PeerProcess> torch;
  if (a.torch) torch = std::make_unique<bench::PeerProcess>(torch_command(a, device, bf16));
  const bench::PairedTimes times = bench::interleaved_steps(a.steps, step, torch.get(), a.products);
  const double t = bench::median(times.qkv);
  const double qkv_rss = peak_rss_gb();
  const PoolStats pool = BufferPool::stats(device);
  const double flops = step_flops(config, a.batch, a.len, a.len - 1);
  const std::string chunking =
      rows > 0 ? ", qkv accumulates gradients over micro-batches of " + std::to_string(rows) + " rows (" +
                     (a.micro_batch > 0 ? "--micro-batch" : "chosen under --max-memory " + train::format_memory_size(a.max_memory) +
                                                                " = " + train::format_bytes(plan.budget_bytes)) + ")"
               : ", whole batch (--max-memory " + train::format_memory_size(a.max_memory) + ")";
  std::printf("%s config: batch %lld x %lld, %lld layers, d_model %lld, d_ff %lld, %lld heads, vocab %lld, dropout 0.1, %s products, %d threads%s%s\n",
              a.preset.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.len), static_cast<long long>(a.layers),
              static_cast<long long>(a.d_model), static_cast<long long>(a.d_ff), static_cast<long long>(a.heads),
              static_cast<long long>(a.vocab), a.precision.c_str(), a.threads,
              a.recompute_ffn ? ", qkv recomputes FFN activations" : "", chunking.c_str());
  std::printf("qkv     step %.*f s (median of %d)  %.0f target tokens/s  peak RSS %.2f GB (tensor pool peak %.2f GB; "
              "estimate %.2f GB = state %.2f + activations %.2f + process %.2f)\n",
              device.is_cuda() ? 4 : 2, t, a.steps, tokens / t, qkv_rss, pool.bytes_peak / 1e9, estimate.total() / 1e9, estimate.state_bytes / 1e9,
              estimate.activation_bytes / 1e9, train::kProcessOverheadBytes / 1e9);
  bench::print_qkv_rate(flops / t * 1e-9, device, pool.bytes_peak, bf16, 6400, 2048, 512);
  bench::print_product_share(times, device);
  bench::print_products_by_shape(times);
  std::fflush(stdout);
  if (torch) print_torch(a, device, pool.bytes_peak, times, torch->finish(), qkv_rss);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_train_step: %s\n", e.what());
  return 1;
}
