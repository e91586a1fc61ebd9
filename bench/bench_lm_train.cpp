// Language-model training of a decoder-only GPT in qkv and in PyTorch 2.x, in the same benchmark run:
// tokens/s of each (median over N steps after a warm-up), the ratio, peak memory of each, and qkv's
// GFLOP/s against the SGEMM ceiling measured now.
//
// Usage: bench_lm_train [--steps N] [--threads T] [--batch B] [--block T] [--layers L] [--d-model D]
//                       [--heads H] [--d-ff F] [--vocab V] [--dropout P] [--recompute-ffn]
//                       [--micro-batch ROWS] [--attention seed|sdpa] [--python PATH] [--no-torch] [--products]
//                       [--device cpu|cuda] [--precision float32|bf16]
// Defaults: batch 8 x block 256, 6 layers, d_model 512, 8 heads, d_ff 2048, vocabulary 8000, dropout
// 0.1, GPT-2's choices otherwise (pre-LN, learned positions, GELU tanh, tied output), AdamW (lr 3e-4,
// weight decay 0.1 on matrices), 3 timed steps, 2 threads. One fixed batch of random ids (B, T + 1).
// PyTorch runs as `PYTHON bench/lm_train_torch.py --serve` in its own process (so its peak RSS is its own),
// its steps alternating with qkv's (bench_common.h, PeerProcess);
// PYTHON defaults to build/bench-venv/bin/python (bench/setup_peers.sh creates it).
// --device cuda: both train on the GPU (scripts/gpu_check.sh runs it there; docs/gpu.md).
// --precision bf16: qkv's products in bf16 (ops/precision.h), PyTorch under
// torch.autocast("cpu" or "cuda", dtype=torch.bfloat16) (its mixed precision; use --attention sdpa
// for its fastest mode).
#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "bench_common.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/isa.h"
#include "qkv/ops/precision.h"
#include "qkv/core/threads.h"
#include "qkv/models/causal_lm.h"
#include "qkv/train/step.h"

using namespace qkv;

namespace {
struct Args {
  int steps = 3, threads = 2;
  int64_t batch = 8, block = 256, layers = 6, d_model = 512, heads = 8, d_ff = 2048, vocab = 8000;
  float dropout = 0.1f;
  bool torch = true, recompute_ffn = false;
  bool products = false;  // --products: the step's products by shape (kernels/product_clock.h)
  int64_t micro_batch = 0;
  std::string attention = "seed";
  std::string device = "cpu";  // cuda: qkv and PyTorch both train on the GPU
  std::string precision = "float32";
  std::string python = QKV_SOURCE_DIR "/build/bench-venv/bin/python";
};

using bench::peak_rss_gb;

// Matmul FLOPs of one training step (forward 2mnk, backward twice that): the linears, the tied
// output projection, and attention's two products counted over the full T x T square.
double step_flops(const Args& a) {
  const double D = a.d_model, F = a.d_ff, V = a.vocab, L = a.layers, B = a.batch, T = a.block;
  const double fwd = B * T * (L * (4 * D * D + 2 * D * F) + D * V) * 2 + L * 4.0 * B * T * T * D;
  return 3 * fwd;
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto str = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    auto num = [&] { const std::string s = str(); return s.empty() ? 0 : std::stoll(s); };
    if (!std::strcmp(argv[i], "--steps")) a.steps = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--batch")) a.batch = num();
    else if (!std::strcmp(argv[i], "--block")) a.block = num();
    else if (!std::strcmp(argv[i], "--layers")) a.layers = num();
    else if (!std::strcmp(argv[i], "--d-model")) a.d_model = num();
    else if (!std::strcmp(argv[i], "--heads")) a.heads = num();
    else if (!std::strcmp(argv[i], "--d-ff")) a.d_ff = num();
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = num();
    else if (!std::strcmp(argv[i], "--dropout")) a.dropout = std::stof(str());
    else if (!std::strcmp(argv[i], "--recompute-ffn")) a.recompute_ffn = true;
    else if (!std::strcmp(argv[i], "--micro-batch")) a.micro_batch = num();
    else if (!std::strcmp(argv[i], "--attention")) a.attention = str();
    else if (!std::strcmp(argv[i], "--python")) a.python = str();
    else if (!std::strcmp(argv[i], "--no-torch")) a.torch = false;
    else if (!std::strcmp(argv[i], "--products")) a.products = true;
    else if (!std::strcmp(argv[i], "--device")) a.device = str();
    else if (!std::strcmp(argv[i], "--precision")) a.precision = str();
    else { std::fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
  }
  if (a.steps < 1 || a.block < 1 || a.batch < 1) { std::fprintf(stderr, "need --steps, --batch, --block >= 1\n"); return 2; }
  set_num_threads(a.threads);
  const ops::ProductPrecisionScope precision(ops::parse_precision(a.precision));
  const bool bf16 = ops::product_precision() == ops::Precision::BF16;
  bench::print_cpu_line(bf16);
  const Device device = bench::training_device(a.device);

  models::TransformerConfig config = models::decoder_only_defaults();
  config.tgt_vocab_size = config.src_vocab_size = a.vocab;
  config.d_model = a.d_model;
  config.num_heads = a.heads;
  config.num_layers = a.layers;
  config.d_ff = a.d_ff;
  config.max_seq_length = a.block;
  config.dropout = a.dropout;
  config.bos_id = config.eos_id = 0;
  models::CausalLM model(config, 0);
  model.train();
  model.set_recompute_ffn(a.recompute_ffn);
  model.to(device);  // the optimizer's moments follow the parameters
  train::AdamOptions adam;
  adam.lr = 3e-4;
  adam.weight_decay = 0.1;
  adam.decoupled_weight_decay = true;
  train::Adam opt(model.named_parameters(), adam);

  // One fixed batch of random ids (B, block + 1) in [0, vocab).
  std::mt19937_64 eng(0);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(a.vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(a.batch * (a.block + 1)));
  for (int32_t& v : ids) v = id(eng);
  const Tensor blocks = Tensor::from_ids(Dims{a.batch, a.block + 1}, ids);

  int64_t tokens = 0;
  float loss = 0;
  const auto step = [&] {
    const train::StepResult r = train::train_step(model, opt, Tensor(), blocks, 0.f, a.micro_batch);
    tokens = r.target_tokens;
    loss = r.loss;
    // On a GPU the backward and the update are still queued when train_step returns (it waited for
    // the loss only): a step is timed to its end, as PyTorch's loss.item() after optimizer.step().
    cuda::synchronize(device);
  };
  step();  // warm-up: fills the buffer pool
  // PyTorch in its own process (its peak RSS its own), its steps alternating with qkv's.
  std::unique_ptr<bench::PeerProcess> torch;
  if (a.torch)
    torch = std::make_unique<bench::PeerProcess>(
        a.python + " " + bench::bench_dir() + "/lm_train_torch.py --serve --steps " + std::to_string(a.steps) + " --threads " +
        std::to_string(a.threads) + " --batch " + std::to_string(a.batch) + " --block " + std::to_string(a.block) +
        " --layers " + std::to_string(a.layers) + " --d-model " + std::to_string(a.d_model) + " --heads " +
        std::to_string(a.heads) + " --d-ff " + std::to_string(a.d_ff) + " --vocab " + std::to_string(a.vocab) +
        " --dropout " + std::to_string(a.dropout) + " --attention " + a.attention +
        bench::peer_device_flags(device, bf16));
  const bench::PairedTimes times = bench::interleaved_steps(a.steps, step, torch.get(), a.products);
  const double t = bench::median(times.qkv);
  const double qkv_rss = peak_rss_gb();
  const PoolStats pool = BufferPool::stats(device);
  const double gflops = step_flops(a) / t * 1e-9;

  std::printf("GPT: batch %lld x block %lld, %lld layers, d_model %lld, %lld heads, d_ff %lld, vocab %lld, dropout %.2g, "
              "learned positions, GELU tanh, tied output, AdamW, %s products, %d threads%s%s\n",
              static_cast<long long>(a.batch), static_cast<long long>(a.block), static_cast<long long>(a.layers),
              static_cast<long long>(a.d_model), static_cast<long long>(a.heads), static_cast<long long>(a.d_ff),
              static_cast<long long>(a.vocab), a.dropout, a.precision.c_str(), a.threads,
              a.recompute_ffn ? ", qkv recomputes FFN activations" : "",
              a.micro_batch > 0
                  ? (", qkv accumulates gradients over micro-batches of " + std::to_string(a.micro_batch) + " rows").c_str()
                  : "");
  std::printf("qkv     step %.3f s (median of %d)  %.0f tokens/s  peak RSS %.2f GB (tensor pool peak %.2f GB)  loss %.3f\n",
              t, a.steps, tokens / t, qkv_rss, pool.bytes_peak / 1e9, loss);
  bench::print_qkv_rate(gflops, device, pool.bytes_peak, bf16);
  bench::print_product_share(times, device);
  bench::print_products_by_shape(times);
  std::fflush(stdout);
  if (!torch) return 0;
  const nlohmann::json j = torch->finish();
  const double tt = bench::median(times.peer);
  const double trss = j["peak_rss_bytes"].get<double>() / 1e9;
  const double timport = j["rss_after_import_bytes"].get<double>() / 1e9;
  std::printf("pytorch step %.3f s (median of %d, alternating with qkv's)  %.0f tokens/s  peak RSS %.2f GB (%.2f GB after import torch)  "
              "loss %.3f  (torch %s, %s attention%s)\n",
              tt, a.steps, j["tokens_per_step"].get<double>() / tt, trss, timport, j["losses"].back().get<double>(),
              j["torch_version"].get<std::string>().c_str(), a.attention.c_str(), bf16 ? ", bf16 autocast" : "");
  bench::print_gpu_memory(device, pool.bytes_peak, j);
  std::printf("ratio   qkv is %.2fx faster, uses %.2f of PyTorch's peak %smemory; %s\n", tt / t, qkv_rss / trss,
              device.is_cuda() ? "host " : "", bench::pair_ratios(times).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_lm_train: %s\n", e.what());
  return 1;
}
