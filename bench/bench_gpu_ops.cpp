// Where a GPT training step's GPU time goes, op by op: each op of a GPT-2-shaped step (default:
// GPT-2 small, batch 16 x 1024) timed alone on the GPU (median of --reps calls, each waited for),
// then multiplied by the times it runs in one step, so that the rows add up to an estimate of the
// step. Optionally PyTorch's SDPA on the same attention shape (--python PATH), float32 and bf16.
//
// Usage: bench_gpu_ops [--batch B] [--block T] [--layers L] [--d-model D] [--heads H] [--vocab V]
//                      [--reps R] [--python PATH] [--only attention]
// --only attention: attention's forward and backward alone, each form (for ncu, which replays the
// kernels it profiles: scripts/gpu_check.sh's ncu stage).
// Needs a -DQKV_CUDA=ON build and a GPU (scripts/gpu_check.sh runs it; docs/gpu.md keeps the output).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "scoped_env.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"

using namespace qkv;

namespace {

struct Args {
  int64_t batch = 16, block = 1024, layers = 12, d_model = 768, heads = 12, vocab = 50257;
  int reps = 5;
  std::string python;
  std::string only;  // "attention": attention's rows alone (what scripts/gpu_check.sh's ncu stage profiles)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gpu_ops: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--batch")) a.batch = std::atoll(next());
    else if (!std::strcmp(argv[i], "--block")) a.block = std::atoll(next());
    else if (!std::strcmp(argv[i], "--layers")) a.layers = std::atoll(next());
    else if (!std::strcmp(argv[i], "--d-model")) a.d_model = std::atoll(next());
    else if (!std::strcmp(argv[i], "--heads")) a.heads = std::atoll(next());
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = std::atoll(next());
    else if (!std::strcmp(argv[i], "--reps")) a.reps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--python")) a.python = next();
    else if (!std::strcmp(argv[i], "--only")) {
      a.only = next();
      if (a.only != "attention") {
        std::fprintf(stderr, "bench_gpu_ops: --only: expected attention, got '%s'\n", a.only.c_str());
        std::exit(2);
      }
    } else {
      std::fprintf(stderr, "bench_gpu_ops: unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return a;
}

const Device kGpu = Device::cuda(0);

Tensor random_on_gpu(const Dims& shape, uint64_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(shape);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(gen);
  return t.to(kGpu);
}

// Median seconds of f over reps calls, each waited for on the GPU, after one warm-up call.
double gpu_seconds(int reps, const std::function<void()>& f) {
  f();
  cuda::synchronize(kGpu);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    cuda::synchronize(kGpu);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return bench::median(times);
}

struct Row {
  std::string name;
  double seconds;  // one call
  int64_t per_step;
};

void print_rows(const std::vector<Row>& rows, const char* title) {
  double total = 0;
  for (const Row& r : rows) total += r.seconds * r.per_step;
  std::printf("%s: estimated %.1f ms a step from the ops below\n", title, total * 1e3);
  for (const Row& r : rows)
    std::printf("  %-44s %8.3f ms x %3lld = %7.1f ms  %5.1f%%\n", r.name.c_str(), r.seconds * 1e3,
                static_cast<long long>(r.per_step), r.seconds * r.per_step * 1e3,
                100.0 * r.seconds * r.per_step / total);
}

// The linear layers of a step, forward and backward (dx, dW, db), in `precision`.
void linear_rows(const Args& a, ops::Precision precision, std::vector<Row>* rows) {
  const ops::ProductPrecisionScope scope(precision);
  const int64_t M = a.batch * a.block, D = a.d_model;
  struct Shape {
    const char* name;
    int64_t in, out, per_step;
    bool bias;
  };
  const Shape shapes[] = {{"qkv projection", D, 3 * D, a.layers, true},
                          {"attention output", D, D, a.layers, true},
                          {"ffn up", D, 4 * D, a.layers, true},
                          {"ffn down", 4 * D, D, a.layers, true},
                          {"output layer (tied)", D, a.vocab, 1, false}};
  for (const Shape& s : shapes) {
    const Tensor x = random_on_gpu(Dims{M, s.in}, 1), w = random_on_gpu(Dims{s.out, s.in}, 2, 0.05f);
    const Tensor b = s.bias ? random_on_gpu(Dims{s.out}, 3) : Tensor();
    const Tensor dy = random_on_gpu(Dims{M, s.out}, 4);
    const std::string tag = std::string(" ") + ops::precision_name(precision);
    const double flops = 2.0 * M * s.in * s.out;
    const double fwd = gpu_seconds(a.reps, [&] { (void)ops::linear_forward(x, w, b); });
    const double bwd = gpu_seconds(a.reps, [&] {
      Tensor dx, dw, db;
      ops::linear_backward(dy, x, w, &dx, &dw, s.bias ? &db : nullptr);
    });
    if (precision == ops::Precision::BF16 && s.out % 4 != 0) {
      // Rows of C not 16-byte aligned: kernels/cuda/gemm.cu writes them in place; timed beside the
      // product written to aligned scratch and copied (QKV_CUDA_ALIGN_C=1), on the same GPU.
      double fwd_scratch = 0;
      {
        const testing::ScopedEnv scratch("QKV_CUDA_ALIGN_C", "1");
        fwd_scratch = gpu_seconds(a.reps, [&] { (void)ops::linear_forward(x, w, b); });
      }
      std::printf("%s fwd%s, %lld columns: %.3f ms written in place (the default), %.3f ms through aligned scratch\n",
                  s.name, tag.c_str(), static_cast<long long>(s.out), fwd * 1e3, fwd_scratch * 1e3);
    }
    char line[160];
    std::snprintf(line, sizeof line, "%s fwd%s (%.0f TFLOP/s)", s.name, tag.c_str(), flops / fwd * 1e-12);
    rows->push_back({line, fwd, s.per_step});
    std::snprintf(line, sizeof line, "%s bwd%s (%.0f TFLOP/s)", s.name, tag.c_str(), 2 * flops / bwd * 1e-12);
    rows->push_back({line, bwd, s.per_step});
  }
}

// Inference's products with a prepared weight in each GPU form (--compute-type float32, bf16, int8),
// at a decoding step's rows (beam 4 x batch 32) and at a whole batch's: the feed-forward's first
// layer and the output layer. int8 there is the CPU's arithmetic (kernels/cuda/int8_gemm.cu): the
// activations quantized by a kernel of qkv's, int32 sums by cuBLAS, then dequantized.
void inference_weight_rows(const Args& a) {
  struct Shape {
    const char* name;
    int64_t in, out;
  };
  const Shape shapes[] = {{"ffn up", a.d_model, 4 * a.d_model}, {"output layer", a.d_model, a.vocab}};
  for (int64_t M : {int64_t{128}, a.batch * a.block})
    for (const Shape& s : shapes) {
      const Tensor x = random_on_gpu(Dims{M, s.in}, 5), w = random_on_gpu(Dims{s.out, s.in}, 6, 0.05f);
      const double ops_per_call = 2.0 * M * s.in * s.out;
      std::printf("inference %s, %lld rows:", s.name, static_cast<long long>(M));
      for (DType dtype : {DType::F32, DType::BF16, DType::I8}) {
        const ops::LinearWeight lw = ops::prepare_linear_weight(w, dtype);
        const double t = gpu_seconds(a.reps, [&] { (void)ops::linear_forward(x, lw, Tensor()); });
        std::printf("  %s %.3f ms (%.0f T op/s)", dtype_name(dtype), t * 1e3, ops_per_call / t * 1e-12);
      }
      std::printf("\n");
    }
}

// The output layer's product alone, as cuBLAS gets it (kernels::cuda::gemm_bf16_nt: bf16 operands
// made once, float32 logits): at the vocabulary's own width (rows of C not 16-byte aligned at
// 50257), padded to 8 and to 64 columns (llm.c pads GPT-2's to 50304), and the feed-forward's
// width for comparison; whole, and in chunks of 2048 rows. On an H200 (2026-11-30) the output layer
// ran at 72-92 TFLOP/s against 250-400 for the other products, with and without aligned rows: these
// rows say which of width, alignment or the size of one call costs it.
void output_layer_sweep(const Args& a) {
  if constexpr (cuda::kBuilt) {  // the kernel exists only in a CUDA build
    const int64_t M = a.batch * a.block, K = a.d_model, chunk = 2048;
    const Tensor x = random_on_gpu(Dims{M, K}, 7).to(DType::BF16);
    const auto round_up = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
    for (const int64_t N : {a.vocab, round_up(a.vocab, 8), round_up(a.vocab, 64), 4 * K}) {
      const Tensor w = random_on_gpu(Dims{N, K}, 8, 0.05f).to(DType::BF16);
      Tensor c = Tensor::empty(Dims{M, N}, DType::F32, kGpu);
      const qkv::bfloat16 *X = x.data<qkv::bfloat16>(), *W = w.data<qkv::bfloat16>();
      float* C = c.data<float>();
      const double whole = gpu_seconds(a.reps, [&] { kernels::cuda::gemm_bf16_nt(M, N, K, X, W, nullptr, C); });
      const double chunked = gpu_seconds(a.reps, [&] {
        for (int64_t r = 0; r < M; r += chunk)
          kernels::cuda::gemm_bf16_nt(std::min(chunk, M - r), N, K, X + r * K, W, nullptr, C + r * N);
      });
      const double flops = 2.0 * M * N * K;
      std::printf("output-layer product %lld x %lld x %lld (bf16, f32 out): whole %.3f ms (%.0f TFLOP/s), "
                  "%lld-row chunks %.3f ms (%.0f TFLOP/s)\n",
                  static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), whole * 1e3,
                  flops / whole * 1e-12, static_cast<long long>(chunk), chunked * 1e3, flops / chunked * 1e-12);
    }
  }
}

// Attention's forward and backward in `precision`: float32 flash kernels, or in bf16 precision their
// tensor-core form (kernels/cuda/flash_attention_bf16.cu).
void attention_rows(const Args& a, ops::Precision precision, std::vector<Row>* rows) {
  const ops::ProductPrecisionScope scope(precision);
  const int64_t B = a.batch, T = a.block, H = a.heads, D = a.d_model, dk = D / H;
  const Tensor x = random_on_gpu(Dims{B, T, 3 * D}, 5, 2.f);
  const Tensor q = x.narrow(2, 0, D), k = x.narrow(2, D, D), v = x.narrow(2, 2 * D, D);
  const Tensor dy = random_on_gpu(Dims{B, T, D}, 6);
  ops::AttentionMasks masks;
  masks.causal = true;
  ops::AttentionSaved saved;
  const double flops = 4.0 * B * H * T * T * dk / 2;  // causal: half the scores
  const double fwd = gpu_seconds(a.reps, [&] {
    (void)ops::multi_head_attention_forward_saving(q, k, v, H, masks, {}, &saved, false);
  });
  const double bwd = gpu_seconds(a.reps, [&] {
    Tensor dq, dkk, dv;
    ops::multi_head_attention_backward(dy, q, k, v, H, saved, masks, {}, &dq, &dkk, &dv);
  });
  if (precision == ops::Precision::Float32) {
    // The forward with the next tile prefetched (kernels/cuda/flash_attention.cu), timed beside it on
    // the same GPU; not a row of the step (the rows add up to it).
    double fwd_prefetch = 0;
    {
      const testing::ScopedEnv prefetch("QKV_FLASH_PREFETCH", "1");
      fwd_prefetch = gpu_seconds(a.reps, [&] {
        (void)ops::multi_head_attention_forward_saving(q, k, v, H, masks, {}, &saved, false);
      });
    }
    std::printf("attention forward, one layer: %.3f ms loading tiles as needed (the default), %.3f ms with the next "
                "tile prefetched\n", fwd * 1e3, fwd_prefetch * 1e3);
  }
  if (precision == ops::Precision::BF16) {
    // The WMMA kernels (kernels/cuda/flash_attention_bf16.cu), which QKV_FLASH_MMA=0 chooses, timed
    // beside the default register-level form (flash_attention_mma.cu) on the same GPU; their rows count
    // for nothing in the step (x0).
    double fwd_wmma = 0, bwd_wmma = 0;
    {
      const testing::ScopedEnv wmma("QKV_FLASH_MMA", "0");
      fwd_wmma = gpu_seconds(a.reps, [&] {
        (void)ops::multi_head_attention_forward_saving(q, k, v, H, masks, {}, &saved, false);
      });
      bwd_wmma = gpu_seconds(a.reps, [&] {
        Tensor dq, dkk, dv;
        ops::multi_head_attention_backward(dy, q, k, v, H, saved, masks, {}, &dq, &dkk, &dv);
      });
    }
    std::printf("attention, one layer, bf16: forward %.3f ms (mma.sync, the default) %.3f ms (wmma), backward %.3f ms "
                "(mma.sync) %.3f ms (wmma)\n", fwd * 1e3, fwd_wmma * 1e3, bwd * 1e3, bwd_wmma * 1e3);
    char wmma_line[160];
    std::snprintf(wmma_line, sizeof wmma_line, "attention fwd, flash bf16 wmma (%.1f TFLOP/s)", flops / fwd_wmma * 1e-12);
    rows->push_back({wmma_line, fwd_wmma, 0});
    std::snprintf(wmma_line, sizeof wmma_line, "attention bwd, flash bf16 wmma (%.1f TFLOP/s of 2x fwd)",
                  2 * flops / bwd_wmma * 1e-12);
    rows->push_back({wmma_line, bwd_wmma, 0});
  }
  const char* form = precision == ops::Precision::BF16 ? "bf16 mma.sync" : "f32";
  char line[160];
  std::snprintf(line, sizeof line, "attention fwd, flash %s (%.1f TFLOP/s)", form, flops / fwd * 1e-12);
  rows->push_back({line, fwd, a.layers});
  std::snprintf(line, sizeof line, "attention bwd, flash %s (%.1f TFLOP/s of 2x fwd)", form, 2 * flops / bwd * 1e-12);
  rows->push_back({line, bwd, a.layers});
}

void other_rows(const Args& a, std::vector<Row>* rows) {
  const int64_t M = a.batch * a.block, D = a.d_model;
  {
    const Tensor x = random_on_gpu(Dims{M, D}, 7), w = random_on_gpu(Dims{D}, 8), b = random_on_gpu(Dims{D}, 9);
    const Tensor dy = random_on_gpu(Dims{M, D}, 10);
    ops::LayerNormOut saved = ops::layernorm_forward(x, w, b, 1e-5f);
    rows->push_back({"layernorm fwd", gpu_seconds(a.reps, [&] { saved = ops::layernorm_forward(x, w, b, 1e-5f); }),
                     2 * a.layers + 1});
    rows->push_back({"layernorm bwd", gpu_seconds(a.reps, [&] {
                       Tensor dx, dw, db;
                       ops::layernorm_backward(dy, x, w, saved, &dx, &dw, &db);
                     }),
                     2 * a.layers + 1});
  }
  {
    const Tensor x = random_on_gpu(Dims{M, 4 * D}, 11), dy = random_on_gpu(Dims{M, 4 * D}, 12);
    rows->push_back({"gelu (tanh) fwd", gpu_seconds(a.reps, [&] { (void)ops::gelu_tanh_forward(x); }), a.layers});
    rows->push_back({"gelu (tanh) bwd", gpu_seconds(a.reps, [&] {
                       Tensor dx;
                       ops::gelu_tanh_backward(dy, x, &dx);
                     }),
                     a.layers});
    const Tensor r = random_on_gpu(Dims{M, D}, 13);
    rows->push_back({"residual add", gpu_seconds(a.reps, [&] { (void)ops::add_forward(r, r); }), 2 * a.layers});
  }
  {
    const Tensor logits = random_on_gpu(Dims{M, a.vocab}, 14, 3.f);
    std::vector<int32_t> t(static_cast<size_t>(M));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(a.vocab));
    const Tensor targets = Tensor::from_ids(Dims{M}, t).to(kGpu);
    ops::CrossEntropyOut saved = ops::cross_entropy_forward(logits, targets, -100, 0.f);
    rows->push_back({"cross-entropy fwd (waits for the loss)",
                     gpu_seconds(a.reps, [&] { saved = ops::cross_entropy_forward(logits, targets, -100, 0.f); }), 1});
    rows->push_back({"cross-entropy bwd", gpu_seconds(a.reps, [&] {
                       Tensor dl;
                       ops::cross_entropy_backward(1.f, logits, targets, saved, -100, 0.f, &dl);
                     }),
                     1});
  }
  {
    const Tensor table = random_on_gpu(Dims{a.vocab, D}, 15);
    std::vector<int32_t> ids(static_cast<size_t>(M));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 104729) % static_cast<size_t>(a.vocab));
    const Tensor gids = Tensor::from_ids(Dims{a.batch, a.block}, ids).to(kGpu);
    const Tensor dout = random_on_gpu(Dims{a.batch, a.block, D}, 16);
    rows->push_back({"embedding fwd (waits for the id check)",
                     gpu_seconds(a.reps, [&] { (void)ops::embedding_forward(table, gids); }), 1});
    rows->push_back({"embedding bwd", gpu_seconds(a.reps, [&] {
                       Tensor dt;
                       ops::embedding_backward(dout, gids, &dt, table.shape());
                     }),
                     1});
  }
  {
    // Adam over every parameter: in a few launches as the optimizer does (ops::adam_step_many), and
    // not counted in the step, the same with the kernel's first form and one launch a tensor.
    const int64_t V = a.vocab, L = a.layers;
    std::vector<Dims> shapes = {{V, D}, {a.block, D}};
    for (int64_t l = 0; l < L; ++l)
      for (const Dims& s : std::vector<Dims>{{3 * D, D}, {3 * D}, {D, D}, {D}, {4 * D, D}, {4 * D}, {D, 4 * D}, {D},
                                              {D}, {D}, {D}, {D}})
        shapes.push_back(s);
    std::vector<Tensor> p, g, m, v;
    for (size_t i = 0; i < shapes.size(); ++i) {
      p.push_back(random_on_gpu(shapes[i], 20 + i));
      g.push_back(random_on_gpu(shapes[i], 40 + i));
      m.push_back(Tensor::zeros(shapes[i], DType::F32, kGpu));
      v.push_back(Tensor::zeros(shapes[i], DType::F32, kGpu));
    }
    const ops::AdamScalars s{0.9f, 0.1f, 0.95f, 0.05f, 1e-4f, 0.5f, 1e-8f, 0.f};
    std::vector<ops::AdamTensors> all;
    for (size_t i = 0; i < p.size(); ++i) all.push_back({&p[i], &g[i], &m[i], &v[i]});
    char line[160];
    std::snprintf(line, sizeof line, "AdamW, %zu tensors, multi-tensor", shapes.size());
    rows->push_back({line, gpu_seconds(a.reps, [&] { ops::adam_step_many(all, s); }), 1});
    {
      const testing::ScopedEnv scalar("QKV_CUDA_ADAM_SCALAR", "1");  // the kernel's first form: an element a thread
      std::snprintf(line, sizeof line, "AdamW, %zu tensors, multi-tensor, an element a thread", shapes.size());
      rows->push_back({line, gpu_seconds(a.reps, [&] { ops::adam_step_many(all, s); }), 0});
    }
    std::snprintf(line, sizeof line, "AdamW, %zu tensors, a launch each", shapes.size());
    rows->push_back({line, gpu_seconds(a.reps, [&] {
                       for (size_t i = 0; i < p.size(); ++i) ops::adam_step(p[i], g[i], m[i], v[i], s);
                     }),
                     0});
  }
}

void torch_attention(const Args& a) {
  if (a.python.empty()) return;
  const std::string cmd = a.python + " -c \"" +
                          "import torch, time, torch.nn.functional as F\n"
                          "B,T,H,dk=" + std::to_string(a.batch) + "," + std::to_string(a.block) + "," +
                          std::to_string(a.heads) + "," + std::to_string(a.d_model / a.heads) + "\n"
                          "for dt in (torch.float32, torch.bfloat16):\n"
                          "  q,k,v=[torch.randn(B,H,T,dk,device='cuda',dtype=dt,requires_grad=True) for _ in range(3)]\n"
                          "  def f():\n"
                          "    o=F.scaled_dot_product_attention(q,k,v,is_causal=True); torch.cuda.synchronize(); return o\n"
                          "  def fb():\n"
                          "    o=F.scaled_dot_product_attention(q,k,v,is_causal=True); o.backward(torch.ones_like(o)); torch.cuda.synchronize()\n"
                          "  ts={}\n"
                          "  for name,g in (('fwd',f),('fwd+bwd',fb)):\n"
                          "    g(); r=[]\n"
                          "    for _ in range(5):\n"
                          "      t=time.perf_counter(); g(); r.append(time.perf_counter()-t)\n"
                          "    ts[name]=sorted(r)[2]\n"
                          "  print('pytorch SDPA %s: fwd %.3f ms, bwd %.3f ms (torch %s)' % (str(dt)[6:], ts['fwd']*1e3, (ts['fwd+bwd']-ts['fwd'])*1e3, torch.__version__))\n"
                          "M,K,V=B*T,H*dk," + std::to_string(a.vocab) + "\n"
                          "x=torch.randn(M,K,device='cuda',dtype=torch.bfloat16); w=torch.randn(V,K,device='cuda',dtype=torch.bfloat16)*0.05\n"
                          "for name,g in (('bf16 out',lambda: F.linear(x,w)),('f32 out',lambda: torch.mm(x,w.t(),out_dtype=torch.float32))):\n"
                          "  try:\n"
                          "    g(); torch.cuda.synchronize(); r=[]\n"
                          "    for _ in range(5):\n"
                          "      t=time.perf_counter(); g(); torch.cuda.synchronize(); r.append(time.perf_counter()-t)\n"
                          "    t=sorted(r)[2]; print('pytorch output-layer product %d x %d x %d (%s): %.3f ms (%.0f TFLOP/s)' % (M,V,K,name,t*1e3,2*M*V*K/t*1e-12))\n"
                          "  except Exception as e: print('pytorch output-layer product (%s): %s' % (name, str(e)[:160]))\n"
                          "\"";
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("pytorch SDPA: the peer did not run\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu_ops: no CUDA GPU is visible (or qkv was built without -DQKV_CUDA=ON)\n");
    return 1;
  }
  std::printf("GPT step ops on %s: batch %lld x %lld, %lld layers, d_model %lld, %lld heads, vocab %lld\n",
              cuda::describe(kGpu).c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.block),
              static_cast<long long>(a.layers), static_cast<long long>(a.d_model), static_cast<long long>(a.heads),
              static_cast<long long>(a.vocab));
  if (a.only == "attention") {  // few launches, for a profiler that replays each kernel it profiles
    for (ops::Precision p : {ops::Precision::Float32, ops::Precision::BF16}) {
      std::vector<Row> rows;
      attention_rows(a, p, &rows);
      print_rows(rows, ops::precision_name(p));
    }
    return 0;
  }
  std::vector<Row> common;
  other_rows(a, &common);
  for (ops::Precision p : {ops::Precision::Float32, ops::Precision::BF16}) {
    std::vector<Row> rows;
    linear_rows(a, p, &rows);
    attention_rows(a, p, &rows);
    rows.insert(rows.end(), common.begin(), common.end());
    print_rows(rows, ops::precision_name(p));
  }
  inference_weight_rows(a);
  output_layer_sweep(a);
  torch_attention(a);
  return 0;
}
