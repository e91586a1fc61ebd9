// Every op on a CUDA GPU against the same op on the CPU, in the manner of ggml's test-backend-ops:
// random operands made on the host, the op run on each device, the results (and the gradients of
// the backward ops, written fresh and accumulated) compared. float32 within 1e-5 of the largest
// magnitude of the CPU's result (cuBLAS without TF32 sums in another order); dropout masks and
// anything without arithmetic (copies, gathers, masks) exactly.
//
// The suite needs a GPU: CTest runs it only where one is (tests/cuda/run_gpu_tests.sh skips it by
// name elsewhere, and says so).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/flash_attention.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"
#include "scoped_env.h"

namespace qkv::ops {
namespace {

const Device kGpu = Device::cuda(0);
constexpr double kTol = 1e-5;

Tensor random_tensor(const Dims& shape, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(gen);
  return t;
}

Tensor random_ids(const Dims& shape, int32_t below, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(static_cast<size_t>(shape.numel()));
  for (auto& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(below));
  return Tensor::from_ids(shape, ids);
}

Tensor gpu(const Tensor& t) { return t.to(kGpu); }

// Attention masks of (B, Tq, Tk) drawn from `seed`: a quarter of the keys and a third of the queries
// dropped where asked for.
AttentionMasks random_masks(int64_t B, int64_t Tq, int64_t Tk, bool causal, bool key_mask, bool query_mask,
                            uint32_t seed) {
  AttentionMasks m;
  m.causal = causal;
  std::mt19937 gen(seed);
  const auto keep = [&](int64_t n, uint32_t one_in) {
    std::vector<int32_t> k(static_cast<size_t>(n));
    for (auto& x : k) x = gen() % one_in != 0;
    return k;
  };
  if (key_mask) m.key_keep = Tensor::from_ids(Dims{B, Tk}, keep(B * Tk, 4));
  if (query_mask) m.query_keep = Tensor::from_ids(Dims{B, Tq}, keep(B * Tq, 3));
  return m;
}

// The same masks with their tensors on the GPU.
AttentionMasks masks_on_gpu(const AttentionMasks& cpu) {
  AttentionMasks m = cpu;
  for (Tensor* t : {&m.key_keep, &m.query_keep, &m.bias})
    if (t->defined()) *t = gpu(*t);
  return m;
}

// max |cpu - gpu| <= tol * max(1, max |cpu|), the GPU's tensor read back; shapes equal. Float tensors.
void expect_close(const Tensor& cpu, const Tensor& on_gpu, const std::string& what, double tol = kTol) {
  ASSERT_EQ(on_gpu.device(), kGpu) << what;
  ASSERT_EQ(cpu.shape(), on_gpu.shape()) << what;
  const std::vector<float> a = cpu.to_vector(), b = on_gpu.to_vector();
  double scale = 1, worst = 0;
  size_t at = 0;
  for (float v : a) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::isnan(a[i]) && std::isnan(b[i]) ? 0 : std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, tol * scale) << what << ": element " << at << " cpu " << a[at] << " gpu " << b[at];
}

void expect_equal(const Tensor& cpu, const Tensor& on_gpu, const std::string& what) { expect_close(cpu, on_gpu, what, 0); }

// A backward op run twice on each device: into a fresh slot, then into a slot holding a gradient.
template <class Backward>
void expect_backward_close(const Dims& shape, Backward backward, const std::string& what, double tol = kTol) {
  Tensor cpu_slot, gpu_slot;
  backward(Device::cpu(), &cpu_slot);
  backward(kGpu, &gpu_slot);
  expect_close(cpu_slot, gpu_slot, what + " (fresh slot)", tol);
  Tensor cpu_acc = random_tensor(shape, 99), gpu_acc = gpu(cpu_acc);
  backward(Device::cpu(), &cpu_acc);
  backward(kGpu, &gpu_acc);
  expect_close(cpu_acc, gpu_acc, what + " (accumulated)", tol);
}

using qkv::testing::ScopedEnv;

class OpsOnGpu : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU"; }
};

TEST_F(OpsOnGpu, TensorsMoveAndCopyExactly) {
  const Tensor x = random_tensor(Dims{3, 5, 7}, 1);
  const Tensor g = gpu(x);
  EXPECT_EQ(g.device(), kGpu);
  EXPECT_EQ(g.describe(), "f32(3, 5, 7) on cuda:0");
  expect_equal(x, g, "round trip");
  expect_equal(x.transpose(0, 2).contiguous(), g.transpose(0, 2).contiguous(), "transposed copy");
  expect_equal(x.narrow(1, 1, 3).contiguous(), g.narrow(1, 1, 3).contiguous(), "narrowed copy");
  expect_equal(x.to(DType::BF16).to(DType::F32), g.to(DType::BF16).to(DType::F32), "bf16 rounding");
  EXPECT_EQ(x.to(DType::BF16).to(DType::F32).to_vector(), g.to(DType::BF16).to(Device::cpu()).to_vector())
      << "bf16 bits";
  Tensor z = Tensor::zeros(Dims{4, 4}, DType::F32, kGpu);
  expect_equal(Tensor::zeros(Dims{4, 4}), z, "zeros");
  z.fill(2.5f);
  expect_equal(Tensor::full(Dims{4, 4}, 2.5f), z, "fill");
  EXPECT_EQ(gpu(x).clone().to_vector(), x.to_vector());
  const Tensor ids = random_ids(Dims{2, 9}, 50, 3);
  EXPECT_EQ(gpu(ids).to_ids(), ids.to_ids());
  EXPECT_EQ(gpu(x.narrow(0, 1, 1).narrow(1, 2, 1).narrow(2, 3, 1).contiguous()).item(), x.f32()[1 * 35 + 2 * 7 + 3]);
}

TEST_F(OpsOnGpu, ThePoolReusesDeviceBuffers) {
  const Tensor x = random_tensor(Dims{256, 256}, 2);
  for (int i = 0; i < 2; ++i) (void)gelu_forward(gpu(x));
  const int64_t before = BufferPool::stats(kGpu).system_allocs;
  for (int i = 0; i < 5; ++i) (void)gelu_forward(gpu(x));
  EXPECT_EQ(BufferPool::stats(kGpu).system_allocs, before) << "a steady loop allocates nothing";
}

TEST_F(OpsOnGpu, Elementwise) {
  const Tensor a = random_tensor(Dims{7, 33}, 3, 3.f), b = random_tensor(Dims{7, 33}, 4, 3.f);
  const Tensor dy = random_tensor(Dims{7, 33}, 5);
  expect_close(add_forward(a, b), add_forward(gpu(a), gpu(b)), "add");
  expect_close(scale_forward(a, 0.3f), scale_forward(gpu(a), 0.3f), "scale");
  expect_close(relu_forward(a), relu_forward(gpu(a)), "relu");
  expect_close(gelu_forward(a), gelu_forward(gpu(a)), "gelu");
  expect_close(gelu_tanh_forward(a), gelu_tanh_forward(gpu(a)), "gelu_tanh");
  expect_close(tanh_forward(a), tanh_forward(gpu(a)), "tanh");
  expect_close(silu_forward(a), silu_forward(gpu(a)), "silu");
  const auto on = [](Device d, const Tensor& t) { return t.to(d); };
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { scale_backward(on(d, dy), 0.3f, s); }, "scale backward");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { relu_backward(on(d, dy), on(d, a), s); }, "relu backward");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { gelu_backward(on(d, dy), on(d, a), s); }, "gelu backward");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { gelu_tanh_backward(on(d, dy), on(d, a), s); },
                        "gelu_tanh backward");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { silu_backward(on(d, dy), on(d, a), s); }, "silu backward");
  const Tensor y = tanh_forward(a);
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { tanh_backward(on(d, dy), on(d, y), s); }, "tanh backward");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { accumulate(on(d, dy), s); }, "accumulate");
}

TEST_F(OpsOnGpu, DropoutMasksAreTheCpusBitForBit) {
  const Tensor x = random_tensor(Dims{37, 129}, 6);
  for (float p : {0.1f, 0.5f}) {
    expect_equal(dropout_forward(x, p, 1234, 77), dropout_forward(gpu(x), p, 1234, 77), "dropout p " + std::to_string(p));
    expect_backward_close(x.shape(), [&](Device d, Tensor* s) { dropout_backward(x.to(d), p, 1234, 77, s); },
                          "dropout backward");
  }
}

TEST_F(OpsOnGpu, LinearAndMatmul) {
  const Tensor x = random_tensor(Dims{2, 13, 40}, 7), w = random_tensor(Dims{24, 40}, 8, 0.3f);
  const Tensor b = random_tensor(Dims{24}, 9);
  const Tensor dy = random_tensor(Dims{2, 13, 24}, 10);
  expect_close(linear_forward(x, w, b), linear_forward(gpu(x), gpu(w), gpu(b)), "linear");
  expect_close(linear_forward(x, w, Tensor()), linear_forward(gpu(x), gpu(w), Tensor()), "linear without bias");
  const auto on = [](Device d, const Tensor& t) { return t.to(d); };
  expect_backward_close(x.shape(), [&](Device d, Tensor* s) { linear_backward(on(d, dy), on(d, x), on(d, w), s, nullptr, nullptr); },
                        "linear dx");
  expect_backward_close(w.shape(), [&](Device d, Tensor* s) { linear_backward(on(d, dy), on(d, x), on(d, w), nullptr, s, nullptr); },
                        "linear dw");
  expect_backward_close(b.shape(), [&](Device d, Tensor* s) { linear_backward(on(d, dy), on(d, x), on(d, w), nullptr, nullptr, s); },
                        "linear db");
  for (bool tb : {false, true}) {
    const Tensor ma = random_tensor(Dims{3, 4, 9, 16}, 11), mb = random_tensor(tb ? Dims{3, 4, 11, 16} : Dims{3, 4, 16, 11}, 12);
    const Tensor dc = random_tensor(Dims{3, 4, 9, 11}, 13);
    const std::string what = tb ? "matmul (b transposed)" : "matmul";
    expect_close(matmul_forward(ma, mb, tb), matmul_forward(gpu(ma), gpu(mb), tb), what);
    expect_backward_close(ma.shape(), [&](Device d, Tensor* s) { matmul_backward(on(d, dc), on(d, ma), on(d, mb), tb, s, nullptr); },
                          what + " da");
    expect_backward_close(mb.shape(), [&](Device d, Tensor* s) { matmul_backward(on(d, dc), on(d, ma), on(d, mb), tb, nullptr, s); },
                          what + " db");
  }
}

TEST_F(OpsOnGpu, LinearWeightsOfEveryGpuForm) {
  const Tensor x = random_tensor(Dims{9, 64}, 14), w = random_tensor(Dims{48, 64}, 15, 0.25f), b = random_tensor(Dims{48}, 16);
  const LinearWeight f32 = prepare_linear_weight(gpu(w), DType::F32);
  EXPECT_EQ(f32.weight.device(), kGpu);
  expect_close(linear_forward(x, w, b), linear_forward(gpu(x), f32, gpu(b)), "f32 weight");
  // bf16: the CPU's reference path and cuBLAS multiply the same bf16-rounded operands in float32.
  const LinearWeight bf16 = prepare_linear_weight(gpu(w), DType::BF16);
  EXPECT_EQ(bf16.weight.dtype(), DType::BF16);
  expect_close(linear_forward(x, prepare_linear_weight(w, DType::BF16), b), linear_forward(gpu(x), bf16, gpu(b)),
               "bf16 weight");
  EXPECT_THROW((void)prepare_linear_weight(gpu(w), DType::I32), Error) << "no i32 form of a weight";
}

// int8 on the GPU is the CPU's arithmetic step for step (quantization, exact int32 sums, one fused
// multiply-add), so its products are the CPU's bits: K and N that are not multiples of 4, one row,
// a row of zeros and one of denormals (scale 0: the outputs are the bias), a weight channel of zeros.
TEST_F(OpsOnGpu, Int8WeightsGiveTheCpusBits) {
  struct Shape {
    int64_t M, K, N;
  };
  for (const Shape s : {Shape{9, 64, 48}, Shape{1, 61, 37}, Shape{130, 512, 1003}, Shape{7, 3, 5}}) {
    const std::string name = "int8 " + std::to_string(s.M) + " x " + std::to_string(s.K) + " x " + std::to_string(s.N);
    Tensor x = random_tensor(Dims{s.M, s.K}, 40, 3.f), w = random_tensor(Dims{s.N, s.K}, 41, 0.3f);
    const Tensor b = random_tensor(Dims{s.N}, 42);
    if (s.M > 2) {
      for (int64_t k = 0; k < s.K; ++k) x.f32()[k] = 0.f;
      for (int64_t k = 0; k < s.K; ++k) x.f32()[s.K + k] = 1e-39f * static_cast<float>(k % 3);
    }
    for (int64_t k = 0; k < s.K; ++k) w.f32()[(s.N / 2) * s.K + k] = 0.f;
    const LinearWeight on_cpu = prepare_linear_weight(w, DType::I8), on_gpu = prepare_linear_weight(gpu(w), DType::I8);
    EXPECT_EQ(on_gpu.weight.dtype(), DType::I8);
    EXPECT_EQ(on_gpu.weight.device(), kGpu);
    EXPECT_EQ(on_gpu.weight.shape(), w.shape());
    expect_equal(linear_forward(x, on_cpu, b), linear_forward(gpu(x), on_gpu, gpu(b)), name);
    expect_equal(linear_forward(x, on_cpu, Tensor()), linear_forward(gpu(x), on_gpu, Tensor()), name + ", no bias");
    // ReLU's rows as the CPU quantizes them are the two ops apart (ops.h).
    expect_equal(activation_linear_forward(x, Activation::ReLU, on_cpu, b),
                 activation_linear_forward(gpu(x), Activation::ReLU, on_gpu, gpu(b)), name + " after ReLU");
    const std::vector<Tensor> many_cpu = linear_forward_many(x, {&on_cpu, &on_cpu}, {b, Tensor()});
    const std::vector<Tensor> many_gpu = linear_forward_many(gpu(x), {&on_gpu, &on_gpu}, {gpu(b), Tensor()});
    ASSERT_EQ(many_gpu.size(), 2u);
    for (size_t i = 0; i < 2; ++i) expect_equal(many_cpu[i], many_gpu[i], name + ", one of several");
  }
}

TEST_F(OpsOnGpu, Embedding) {
  const Tensor table = random_tensor(Dims{50, 24}, 17), ids = random_ids(Dims{3, 11}, 50, 18);
  expect_equal(embedding_forward(table, ids), embedding_forward(gpu(table), gpu(ids)), "lookup");
  expect_equal(embedding_forward(table.to(DType::BF16), ids), embedding_forward(gpu(table).to(DType::BF16), gpu(ids)),
               "bf16 lookup");
  const Tensor dout = random_tensor(Dims{3, 11, 24}, 19);
  for (int32_t padding : {-1, ids.i32()[4]})
    expect_backward_close(table.shape(), [&](Device d, Tensor* s) { embedding_backward(dout.to(d), ids.to(d), s, table.shape(), padding); },
                          "embedding backward, padding " + std::to_string(padding));
  Tensor bad = ids.clone();
  bad.i32()[7] = 50;
  try {
    (void)embedding_forward(gpu(table), gpu(bad));
    FAIL() << "an id past the vocabulary must be refused on the GPU too";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 50 out of range for vocabulary size 50 (at flat position 7"), std::string::npos)
        << e.what();
  }
}

TEST_F(OpsOnGpu, LayerNormBothVariants) {
  const Tensor x = random_tensor(Dims{2, 9, 48}, 20, 2.f), r = random_tensor(Dims{2, 9, 48}, 21);
  const Tensor w = random_tensor(Dims{48}, 22, 0.5f), b = random_tensor(Dims{48}, 23);
  Tensor wpos = w.clone();
  for (int64_t i = 0; i < 48; ++i) wpos.f32()[i] = 0.75f + std::fabs(w.f32()[i]);
  const Tensor dy = random_tensor(x.shape(), 24);
  for (LayerNormVariant v : {LayerNormVariant::Standard, LayerNormVariant::UnbiasedStd}) {
    const std::string name = v == LayerNormVariant::Standard ? "layernorm" : "seed003 layernorm";
    const LayerNormOut c = layernorm_forward(x, wpos, b, 1e-5f, v), g = layernorm_forward(gpu(x), gpu(wpos), gpu(b), 1e-5f, v);
    expect_close(c.y, g.y, name);
    expect_close(c.rstd, g.rstd, name + " rstd");
    expect_close(add_layernorm_forward(x, r, wpos, b, 1e-5f, v), add_layernorm_forward(gpu(x), gpu(r), gpu(wpos), gpu(b), 1e-5f, v),
                 name + " of a sum");
    const auto saved = [&](Device d) { return d == kGpu ? g : c; };
    expect_backward_close(x.shape(), [&](Device d, Tensor* s) { layernorm_backward(dy.to(d), x.to(d), wpos.to(d), saved(d), s, nullptr, nullptr); },
                          name + " dx");
    expect_backward_close(w.shape(), [&](Device d, Tensor* s) { layernorm_backward(dy.to(d), x.to(d), wpos.to(d), saved(d), nullptr, s, nullptr); },
                          name + " dweight");
    expect_backward_close(b.shape(), [&](Device d, Tensor* s) { layernorm_backward(dy.to(d), x.to(d), wpos.to(d), saved(d), nullptr, nullptr, s); },
                          name + " dbias");
    EXPECT_FALSE(layernorm_can_use_output(gpu(wpos), gpu(b))) << "on a GPU the input is saved";
    expect_backward_close(x.shape(), [&](Device d, Tensor* s) {
      layernorm_backward_from_output(dy.to(d), saved(d).y, wpos.to(d), b.to(d), saved(d), s, nullptr, nullptr);
    }, name + " dx from the output");
  }
}

// T5's RMSNorm (no mean, no bias) and the gated feed-forward's elementwise product.
TEST_F(OpsOnGpu, RmsNormAndProduct) {
  const Tensor x = random_tensor(Dims{3, 7, 96}, 120, 2.f), r = random_tensor(x.shape(), 121);
  const Tensor w = random_tensor(Dims{96}, 122, 1.5f), dy = random_tensor(x.shape(), 123);
  constexpr LayerNormVariant kRms = LayerNormVariant::RMS;
  const LayerNormOut c = layernorm_forward(x, w, Tensor(), 1e-6f, kRms);
  const LayerNormOut g = layernorm_forward(gpu(x), gpu(w), Tensor(), 1e-6f, kRms);
  expect_close(c.y, g.y, "rms norm");
  expect_close(c.rstd, g.rstd, "rms norm rstd");
  expect_close(add_layernorm_forward(x, r, w, Tensor(), 1e-6f, kRms),
               add_layernorm_forward(gpu(x), gpu(r), gpu(w), Tensor(), 1e-6f, kRms), "rms norm of a sum");
  const auto saved = [&](Device d) { return d == kGpu ? g : c; };
  expect_backward_close(x.shape(), [&](Device d, Tensor* s) {
    layernorm_backward(dy.to(d), x.to(d), w.to(d), saved(d), s, nullptr, nullptr);
  }, "rms norm dx");
  expect_backward_close(w.shape(), [&](Device d, Tensor* s) {
    layernorm_backward(dy.to(d), x.to(d), w.to(d), saved(d), nullptr, s, nullptr);
  }, "rms norm dweight");
  const Tensor a = random_tensor(Dims{5, 33}, 124, 3.f), b = random_tensor(a.shape(), 125, 3.f);
  const Tensor dm = random_tensor(a.shape(), 126);
  expect_close(mul_forward(a, b), mul_forward(gpu(a), gpu(b)), "mul");
  expect_backward_close(a.shape(), [&](Device d, Tensor* s) { mul_backward(dm.to(d), a.to(d), b.to(d), s, nullptr); },
                        "mul da");
  expect_backward_close(b.shape(), [&](Device d, Tensor* s) { mul_backward(dm.to(d), a.to(d), b.to(d), nullptr, s); },
                        "mul db");
}

TEST_F(OpsOnGpu, SoftmaxAndLosses) {
  const Tensor x = random_tensor(Dims{6, 5, 37}, 25, 4.f), dy = random_tensor(x.shape(), 26);
  expect_close(softmax_forward(x), softmax_forward(gpu(x)), "softmax");
  const Tensor y = softmax_forward(x);
  expect_backward_close(x.shape(), [&](Device d, Tensor* s) { softmax_backward(dy.to(d), y.to(d), s); }, "softmax backward");
  Tensor rows = random_tensor(Dims{12, 301}, 27, 6.f), rows_gpu = gpu(rows);
  const Tensor lse = log_softmax_rows_inplace(rows), lse_gpu = log_softmax_rows_inplace(rows_gpu);
  expect_close(rows, rows_gpu, "log-softmax rows");
  expect_close(lse, lse_gpu, "log-softmax normalisers");
  const Tensor logits = random_tensor(Dims{23, 301}, 28, 5.f);
  Tensor targets = random_ids(Dims{23}, 301, 29);
  targets.i32()[3] = targets.i32()[17] = -100;
  for (float smoothing : {0.f, 0.1f}) {
    const std::string what = "cross-entropy, smoothing " + std::to_string(smoothing);
    const CrossEntropyOut c = cross_entropy_forward(logits, targets, -100, smoothing);
    const CrossEntropyOut g = cross_entropy_forward(gpu(logits), gpu(targets), -100, smoothing);
    EXPECT_EQ(c.valid, g.valid) << what;
    expect_close(c.loss, g.loss, what + " loss");
    expect_close(c.row_loss, g.row_loss, what + " rows");
    expect_backward_close(logits.shape(), [&](Device d, Tensor* s) {
      cross_entropy_backward(0.7f, logits.to(d), targets.to(d), d == kGpu ? g : c, -100, smoothing, s);
    }, what + " backward");
    expect_close(cross_entropy_backward_inplace(0.7f, logits.clone(), targets, c, -100, smoothing),
                 cross_entropy_backward_inplace(0.7f, gpu(logits), gpu(targets), g, -100, smoothing), what + " in place");
  }
  Tensor bad = targets.clone();
  bad.i32()[5] = 301;
  EXPECT_THROW((void)cross_entropy_forward(gpu(logits), gpu(bad), -100, 0.f), Error);
}

// Attention with every mask and dropout, on (B, H, T, dk) tensors and on split-heads views.
TEST_F(OpsOnGpu, Attention) {
  const int64_t B = 2, H = 3, Tq = 7, Tk = 9, dk = 16;
  const Tensor q = random_tensor(Dims{B, H, Tq, dk}, 30), k = random_tensor(Dims{B, H, Tk, dk}, 31);
  const Tensor v = random_tensor(Dims{B, H, Tk, dk}, 32), dout = random_tensor(Dims{B, H, Tq, dk}, 33);
  AttentionMasks masks;
  masks.key_keep = Tensor::from_ids(Dims{B, Tk}, {1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  masks.query_keep = Tensor::from_ids(Dims{B, Tq}, {1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1});
  const auto masks_on = [&](Device d, bool causal) {
    AttentionMasks m = masks;
    m.key_keep = masks.key_keep.to(d);
    m.query_keep = masks.query_keep.to(d);
    m.causal = causal;
    return m;
  };
  for (bool causal : {false, true})
    for (float p : {0.f, 0.2f}) {
      const std::string what = std::string("attention") + (causal ? ", causal" : "") + (p > 0 ? ", dropout" : "");
      const AttentionDropoutSpec drop{p, 42, 1000};
      Tensor probs_c, probs_g;
      const Tensor out_c = attention_forward(q, k, v, masks_on(Device::cpu(), causal), drop, &probs_c);
      const Tensor out_g = attention_forward(gpu(q), gpu(k), gpu(v), masks_on(kGpu, causal), drop, &probs_g);
      expect_close(out_c, out_g, what);
      expect_close(probs_c, probs_g, what + " probs");
      const auto probs = [&](Device d) { return d == kGpu ? probs_g : probs_c; };
      for (int which = 0; which < 3; ++which)
        expect_backward_close(which == 0 ? q.shape() : k.shape(), [&](Device d, Tensor* s) {
          attention_backward(dout.to(d), q.to(d), k.to(d), v.to(d), probs(d), masks_on(d, causal), drop,
                             which == 0 ? s : nullptr, which == 1 ? s : nullptr, which == 2 ? s : nullptr);
        }, what + " d" + "qkv"[which]);
    }
  // Multi-head attention reads split-heads views of (B, T, D) projections (strided heads).
  const Tensor xq = random_tensor(Dims{B, Tq, H * dk}, 34), xk = random_tensor(Dims{B, Tk, H * dk}, 35);
  const Tensor dx = random_tensor(xq.shape(), 36);
  Tensor pc, pg;
  const Tensor mc = multi_head_attention_forward(xq, xk, xk, H, masks_on(Device::cpu(), false), {}, &pc);
  const Tensor mg = multi_head_attention_forward(gpu(xq), gpu(xk), gpu(xk), H, masks_on(kGpu, false), {}, &pg);
  expect_close(mc, mg, "multi-head attention");
  expect_backward_close(xk.shape(), [&](Device d, Tensor* s) {
    multi_head_attention_backward(dx.to(d), xq.to(d), xk.to(d), xk.to(d), H, d == kGpu ? pg : pc,
                                  masks_on(d, false), {}, nullptr, s, nullptr);
  }, "multi-head attention dk");
}

// The training forward on a GPU keeps no softmax: the flash kernels (kernels/cuda/flash_attention.h)
// keep two floats per row and the backward recomputes the rest. Against the CPU's fused attention
// with its softmax: every mask, dropout, head widths on both sides of each compiled width (32, 64,
// 128), rows past one block and one tile, fewer queries than keys, and the causal case that skips
// the tiles above the diagonal.
TEST_F(OpsOnGpu, FlashAttentionKeepsNoSoftmaxAndAgreesWithTheCpu) {
  struct Case {
    int64_t B, H, Tq, Tk, dk;
    bool causal, key_mask, query_mask;
    float p;
  };
  const Case cases[] = {
      {2, 3, 7, 9, 16, false, true, true, 0.f},    {2, 3, 7, 9, 16, true, true, true, 0.2f},
      {2, 2, 70, 70, 64, true, false, false, 0.f},  // causal, no padding: tiles above the diagonal skipped
      {1, 2, 40, 100, 64, true, false, false, 0.1f}, {2, 2, 65, 33, 40, false, true, false, 0.f},
      {1, 3, 35, 35, 80, true, false, true, 0.f},    {1, 1, 33, 47, 128, false, true, false, 0.3f},
      {1, 2, 129, 129, 32, true, false, false, 0.f}, {1, 2, 20, 30, 3, false, false, false, 0.f},
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    const std::string what = "flash attention B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " Tq" +
                             std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " dk" + std::to_string(c.dk) +
                             (c.causal ? " causal" : "") + (c.key_mask ? " key-mask" : "") +
                             (c.query_mask ? " query-mask" : "") + (c.p > 0 ? " dropout" : "");
    const Tensor q = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++, 2.f);
    const Tensor k = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++, 2.f);
    const Tensor v = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++);
    const Tensor dout = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++);
    AttentionMasks cpu_masks = random_masks(c.B, c.Tq, c.Tk, c.causal, c.key_mask, c.query_mask, seed++);
    const AttentionMasks gpu_masks = masks_on_gpu(cpu_masks);
    const AttentionDropoutSpec drop{c.p, 7, 123};
    Tensor probs_c;
    const Tensor out_c = attention_forward(q, k, v, cpu_masks, drop, &probs_c);
    AttentionSaved saved;
    const Tensor out_g = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &saved, false);
    EXPECT_FALSE(saved.probs.defined()) << what << ": no softmax kept";
    {  // the forward's other form, the next tile prefetched (QKV_FLASH_PREFETCH=1)
      AttentionSaved prefetched;
      Tensor out_prefetched;
      {
        const ScopedEnv prefetch("QKV_FLASH_PREFETCH", "1");
        out_prefetched = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &prefetched, false);
      }
      // The same arithmetic in the same order: the same bits.
      expect_equal(out_g, out_prefetched, what + " with prefetch");
      expect_equal(saved.stats, prefetched.stats, what + " statistics with prefetch");
    }
    ASSERT_TRUE(saved.stats.defined()) << what;
    EXPECT_EQ(saved.stats.shape(), (Dims{c.B, c.H, c.Tq, 2})) << what;
    expect_close(out_c, out_g, what);
    for (int which = 0; which < 3; ++which)
      expect_backward_close(which == 0 ? q.shape() : k.shape(), [&](Device d, Tensor* s) {
        Tensor* dq = which == 0 ? s : nullptr;
        Tensor* dk = which == 1 ? s : nullptr;
        Tensor* dv = which == 2 ? s : nullptr;
        if (d == kGpu) attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), saved, gpu_masks, drop, dq, dk, dv);
        else attention_backward(dout, q, k, v, probs_c, cpu_masks, drop, dq, dk, dv);
      }, what + " d" + "qkv"[which]);
    // Inference of many queries takes the same kernels without statistics.
    if (c.p == 0.f && c.Tq >= 16)
      expect_close(out_c, attention_forward(gpu(q), gpu(k), gpu(v), gpu_masks, {}, nullptr, true), what + " inference");
  }
}

// T5's attention: scores unscaled, plus a position bias (Tq, Tk, H) shared by the batch rows, whose
// gradient (dS summed over the batch) the backward returns. The row kernels (the softmax kept, and
// decoding's few queries) and the flash kernels (training without the softmax; inference of many
// queries), against the CPU's attention with its softmax.
TEST_F(OpsOnGpu, AttentionWithAPositionBias) {
  struct Case {
    int64_t B, H, Tq, Tk, dk;
    bool causal, key_mask;
    float p;
  };
  const Case cases[] = {{2, 3, 7, 9, 16, false, true, 0.f}, {2, 3, 7, 7, 16, true, false, 0.2f},
                        {2, 2, 70, 70, 64, true, false, 0.f}, {2, 4, 40, 33, 40, false, true, 0.1f},
                        {3, 2, 1, 12, 8, false, true, 0.f}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const std::string what = "biased attention B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " Tq" +
                             std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " dk" + std::to_string(c.dk) +
                             (c.causal ? " causal" : "") + (c.key_mask ? " key-mask" : "") + (c.p > 0 ? " dropout" : "");
    const Tensor q = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++, 0.5f);
    const Tensor k = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++, 0.5f);
    const Tensor v = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++);
    const Tensor dout = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++);
    const Tensor bias = random_tensor(Dims{c.Tq, c.Tk, c.H}, seed++, 2.f);
    AttentionMasks cpu_masks = random_masks(c.B, c.Tq, c.Tk, c.causal, c.key_mask, false, seed++);
    cpu_masks.scale_scores = false;
    cpu_masks.bias = bias;
    const AttentionMasks gpu_masks = masks_on_gpu(cpu_masks);
    const AttentionDropoutSpec drop{c.p, 9, 77};
    Tensor probs_c, probs_g;
    const Tensor out_c = attention_forward(q, k, v, cpu_masks, drop, &probs_c);
    const Tensor out_g = attention_forward(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &probs_g);
    expect_close(out_c, out_g, what);
    expect_close(probs_c, probs_g, what + " probs");
    AttentionSaved flash;
    const Tensor out_f = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &flash, false);
    expect_close(out_c, out_f, what + " (flash)");
    // Gradients of q, k, v and the bias, from the row kernels (the softmax) and the flash kernels.
    for (bool use_flash : {false, true}) {
      const std::string how = use_flash ? " (flash)" : " (softmax kept)";
      for (int which = 0; which < 4; ++which) {
        const Dims shape = which == 0 ? q.shape() : which == 3 ? bias.shape() : k.shape();
        expect_backward_close(shape, [&](Device d, Tensor* s) {
          Tensor* slots[4] = {nullptr, nullptr, nullptr, nullptr};
          slots[which] = s;
          if (d == kGpu)
            attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), use_flash ? flash : AttentionSaved{probs_g, {}, {}},
                               gpu_masks, drop, slots[0], slots[1], slots[2], slots[3]);
          else
            attention_backward(dout, q, k, v, probs_c, cpu_masks, drop, slots[0], slots[1], slots[2], slots[3]);
        }, what + how + " d" + std::string(which == 3 ? "bias" : std::string(1, "qkv"[which])));
      }
    }
    if (c.p == 0.f)
      expect_close(out_c, attention_forward(gpu(q), gpu(k), gpu(v), gpu_masks, {}, nullptr, true), what + " inference");
  }
  // A decoding step reads the new position's bias row through beam search's mapped cache.
  const int64_t B = 3, Bk = 4, H = 2, Tk = 6, dk = 8;
  const Tensor q = random_tensor(Dims{B, H, 1, dk}, 390), k = random_tensor(Dims{Bk, H, Tk, dk}, 391);
  const Tensor v = random_tensor(Dims{Bk, H, Tk, dk}, 392), bias = random_tensor(Dims{1, Tk, H}, 393, 2.f);
  std::vector<int32_t> rows;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Tk; ++j) rows.push_back(static_cast<int32_t>((b + 2 * j) % Bk));
  const Tensor key_rows = Tensor::from_ids(Dims{B, Tk}, rows);
  AttentionMasks cm;
  cm.scale_scores = false;
  cm.bias = bias;
  AttentionMasks gm = cm;
  gm.bias = gpu(bias);
  expect_close(attention_forward_mapped(q, k, v, key_rows, cm, nullptr),
               attention_forward_mapped(gpu(q), gpu(k), gpu(v), gpu(key_rows), gm, nullptr), "mapped biased attention");
}

// Multi-head attention in training on split-heads views (strided heads), q, k and v one tensor (self-
// attention: the three gradients meet in one slot), and the weights kept when the caller asks.
TEST_F(OpsOnGpu, FlashMultiHeadAttentionOnSplitHeads) {
  const int64_t B = 2, T = 50, H = 4, dk = 16;
  const Tensor x = random_tensor(Dims{B, T, H * dk}, 300, 2.f), dy = random_tensor(Dims{B, T, H * dk}, 301);
  AttentionMasks m;
  m.causal = true;
  Tensor probs_c;
  const Tensor out_c = multi_head_attention_forward(x, x, x, H, m, {}, &probs_c);
  AttentionSaved saved;
  const Tensor out_g = multi_head_attention_forward_saving(gpu(x), gpu(x), gpu(x), H, m, {}, &saved, false);
  EXPECT_FALSE(saved.probs.defined());
  expect_close(out_c, out_g, "multi-head flash attention");
  expect_backward_close(x.shape(), [&](Device d, Tensor* s) {
    if (d == kGpu) multi_head_attention_backward(gpu(dy), gpu(x), gpu(x), gpu(x), H, saved, m, {}, s, s, s);
    else multi_head_attention_backward(dy, x, x, x, H, probs_c, m, {}, s, s, s);
  }, "multi-head flash attention, one slot for q, k and v");
  AttentionSaved with_weights;
  (void)multi_head_attention_forward_saving(gpu(x), gpu(x), gpu(x), H, m, {}, &with_weights, true);
  ASSERT_TRUE(with_weights.probs.defined()) << "the weights are kept when asked for";
  expect_close(probs_c, with_weights.probs, "kept weights");
}

// Products in bf16 precision (mixed-precision training): operands rounded to bf16, float32 sums, on
// the GPU's tensor cores through cuBLAS. Against the CPU's gemm_bf16, which rounds the same operands:
// the sums differ in order only (1e-5 of the largest magnitude, as float32), while float32 products
// differ from both by the rounding (checked to be well above that, so the test would see a GPU that
// ignored the precision).
TEST_F(OpsOnGpu, Bf16PrecisionProducts) {
  // 40 outputs: rows of C 16-byte aligned; 43: not, written in place (the default) or, with
  // QKV_CUDA_ALIGN_C=1, to aligned scratch and copied (gemm.cu's AlignedOutput), the bias and the
  // gradient held before the product copied in.
  for (const auto& [out, align_c] : {std::pair<int64_t, const char*>{40, "0"}, {43, "0"}, {43, "1"}}) {
    const ScopedEnv align("QKV_CUDA_ALIGN_C", align_c);
    const std::string shape = " (" + std::to_string(out) + " outputs, QKV_CUDA_ALIGN_C=" + align_c + ")";
    const Tensor x = random_tensor(Dims{3, 17, 96}, 400), w = random_tensor(Dims{out, 96}, 401);
    const Tensor b = random_tensor(Dims{out}, 402), dy = random_tensor(Dims{3, 17, out}, 403);
    const Tensor y_bf16 = linear_forward(x, w, b, Precision::BF16);
    const Tensor y_gpu = linear_forward(gpu(x), gpu(w), gpu(b), Precision::BF16);
    expect_close(y_bf16, y_gpu, "bf16 linear" + shape);
    double apart = 0;
    const std::vector<float> f32 = linear_forward(x, w, b, Precision::Float32).to_vector(), g = y_gpu.to_vector();
    for (size_t i = 0; i < g.size(); ++i) apart = std::max(apart, static_cast<double>(std::fabs(f32[i] - g[i])));
    EXPECT_GT(apart, 1e-3) << "bf16 products on the GPU look like float32 ones" << shape;
    for (int which = 0; which < 2; ++which)
      expect_backward_close(which == 0 ? x.shape() : w.shape(), [&](Device d, Tensor* s) {
        linear_backward(dy.to(d), x.to(d), w.to(d), which == 0 ? s : nullptr, which == 1 ? s : nullptr, nullptr,
                        Precision::BF16);
      }, std::string("bf16 linear backward d") + "xw"[which] + shape);
  }
  const Tensor a = random_tensor(Dims{2, 3, 9, 24}, 404), c = random_tensor(Dims{2, 3, 11, 24}, 405);
  const Tensor dc = random_tensor(Dims{2, 3, 9, 11}, 406);
  expect_close(matmul_forward(a, c, true, Precision::BF16), matmul_forward(gpu(a), gpu(c), true, Precision::BF16),
               "bf16 batched matmul");
  for (int which = 0; which < 2; ++which)
    expect_backward_close(which == 0 ? a.shape() : c.shape(), [&](Device d, Tensor* s) {
      matmul_backward(dc.to(d), a.to(d), c.to(d), true, which == 0 ? s : nullptr, which == 1 ? s : nullptr,
                      Precision::BF16);
    }, std::string("bf16 matmul backward d") + "ab"[which]);
}

// bf16 precision on a GPU runs the flash attention on the tensor cores: Q, K, V, dO, the
// probabilities and dS rounded to bf16, sums and softmax float32. Against the CPU's float32 attention
// of the bf16-rounded q, k, v and dO: within 1e-2 of the largest value (bf16 keeps 8 bits; an index or
// fragment-layout error is off by the values themselves), and apart from the float32 kernels' result.
// Every mask, dropout, T5's bias with unscaled scores, each compiled head width, rows past one block.
// max |x - y| over two tensors of one shape, or that over max(1, max |x|) when relative.
double max_apart(const Tensor& x, const Tensor& y, bool relative = false) {
  const std::vector<float> a = x.to_vector(), b = y.to_vector();
  double apart = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    apart = std::max(apart, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return relative ? apart / scale : apart;
}

// Each bf16 form of the flash kernels (kernels/cuda/flash_common.cuh's QKV_FLASH_MMA: the WMMA
// kernels, the mma.sync ones, and the mma.sync forward before the WMMA backward, which reads its
// statistics) against the CPU's float32 attention of the rounded inputs, and the mma.sync form
// against the WMMA one.
TEST_F(OpsOnGpu, Bf16FlashAttentionOnTheTensorCores) {
  if (!kernels::cuda::flash_bf16_supported()) GTEST_SKIP() << "this GPU has no bf16 tensor cores";
  constexpr double kBf16Tol = 1e-2;
  struct Case {
    int64_t B, H, Tq, Tk, dk;
    bool causal, key_mask, query_mask, bias;
    float p;
  };
  const Case cases[] = {
      {2, 3, 7, 9, 16, false, true, true, false, 0.f},     {2, 3, 7, 9, 16, true, true, true, false, 0.2f},
      {2, 2, 130, 130, 64, true, false, false, false, 0.f},  // causal tiles skipped, rows past two blocks
      {1, 2, 40, 100, 64, true, false, false, false, 0.1f}, {2, 2, 65, 33, 40, false, true, false, false, 0.f},
      {1, 3, 35, 35, 80, true, false, true, false, 0.f},    {1, 1, 70, 47, 128, false, true, false, false, 0.3f},
      {2, 2, 20, 30, 3, false, false, false, false, 0.f},   {2, 4, 40, 33, 40, false, true, false, true, 0.1f},
      {2, 2, 70, 70, 64, true, false, false, true, 0.f},    {2, 2, 300, 300, 64, true, false, false, false, 0.1f},
      {1, 2, 257, 257, 128, false, true, false, false, 0.f},
  };
  const auto rounded = [](const Tensor& t) { return t.to(DType::BF16).to(DType::F32); };
  const char* forms[] = {"0", "1", "fwd"};
  const char* form_names[] = {"wmma", "mma.sync", "mma.sync forward, wmma backward"};
  uint32_t seed = 500;
  for (const Case& c : cases) {
    const std::string shape_name = "bf16 flash attention B" + std::to_string(c.B) + " H" + std::to_string(c.H) +
                                   " Tq" + std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " dk" +
                                   std::to_string(c.dk) + (c.causal ? " causal" : "") +
                                   (c.key_mask ? " key-mask" : "") + (c.query_mask ? " query-mask" : "") +
                                   (c.bias ? " bias" : "") + (c.p > 0 ? " dropout" : "");
    const Tensor q = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++, 1.f);
    const Tensor k = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++, 1.f);
    const Tensor v = random_tensor(Dims{c.B, c.H, c.Tk, c.dk}, seed++);
    const Tensor dout = random_tensor(Dims{c.B, c.H, c.Tq, c.dk}, seed++);
    AttentionMasks cpu_masks = random_masks(c.B, c.Tq, c.Tk, c.causal, c.key_mask, c.query_mask, seed++);
    if (c.bias) {
      cpu_masks.bias = random_tensor(Dims{c.Tq, c.Tk, c.H}, seed++, 2.f);
      cpu_masks.scale_scores = false;
    }
    const AttentionMasks gpu_masks = masks_on_gpu(cpu_masks);
    const AttentionDropoutSpec drop{c.p, 11, 321};
    const Tensor qr = rounded(q), kr = rounded(k), vr = rounded(v), dr = rounded(dout);
    Tensor probs_c;
    const Tensor out_c = attention_forward(qr, kr, vr, cpu_masks, drop, &probs_c);
    AttentionSaved saved_f32;
    const Tensor out_f32 = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &saved_f32, false);
    EXPECT_FALSE(saved_f32.bf16) << shape_name;
    Tensor outs[3], grads[3][4];  // per form: the output, and dq, dk, dv, dbias written into fresh slots
    for (int f = 0; f < 3; ++f) {
      const ScopedEnv form("QKV_FLASH_MMA", forms[f]);
      const std::string what = shape_name + " (" + form_names[f] + ")";
      AttentionSaved saved;
      Tensor out_g;
      {
        const ProductPrecisionScope bf16(Precision::BF16);
        out_g = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, drop, &saved, false);
      }
      EXPECT_TRUE(saved.bf16) << what;
      expect_close(out_c, out_g, what, kBf16Tol);
      EXPECT_GT(max_apart(out_f32, out_g), 1e-5) << what << ": the bf16 result looks like the float32 kernels'";
      outs[f] = out_g;
      for (int which = 0; which < (c.bias ? 4 : 3); ++which) {
        const Dims shape = which == 0 ? q.shape() : which == 3 ? Dims{c.Tq, c.Tk, c.H} : k.shape();
        const auto backward = [&](Device d, Tensor* s) {
          Tensor* slots[4] = {nullptr, nullptr, nullptr, nullptr};
          slots[which] = s;
          if (d == kGpu)
            attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), saved, gpu_masks, drop, slots[0], slots[1],
                               slots[2], slots[3]);
          else
            attention_backward(dr, qr, kr, vr, probs_c, cpu_masks, drop, slots[0], slots[1], slots[2], slots[3]);
        };
        expect_backward_close(shape, backward, what + " d" + (which == 3 ? std::string("bias") : std::string(1, "qkv"[which])),
                              kBf16Tol);
        backward(kGpu, &grads[f][which]);
      }
      if (c.p == 0.f && c.Tq >= 16) {
        const ProductPrecisionScope bf16(Precision::BF16);
        expect_close(out_c, attention_forward(gpu(q), gpu(k), gpu(v), gpu_masks, {}, nullptr, true),
                     what + " inference", kBf16Tol);
      }
    }
    // The mma.sync form against the WMMA one: the same roundings, sums in another order.
    for (int f = 1; f < 3; ++f) {
      const std::string what = shape_name + " (" + form_names[f] + " against wmma)";
      double apart = max_apart(outs[0], outs[f], true);
      std::printf("%s, max |difference| / max(1, max |wmma|): out %.3g", what.c_str(), apart);
      EXPECT_LE(apart, kBf16Tol) << what << " out";
      for (int which = 0; which < (c.bias ? 4 : 3); ++which) {
        apart = max_apart(grads[0][which], grads[f][which], true);
        std::printf(", d%s %.3g", which == 3 ? "bias" : std::string(1, "qkv"[which]).c_str(), apart);
        EXPECT_LE(apart, kBf16Tol) << what << " d" << which;
      }
      std::printf("\n");
    }
  }
}

// A -inf fill (config "mask_fill": "-inf") over a row's first keys, 64 of them padded: a whole
// first tile of keys masked in every flash kernel (32 keys a tile in float32, 64 in bf16). The
// online softmax then subtracted a running maximum of -inf (e^(-inf - -inf) = NaN, which no later
// tile repairs); the CPU's row maximum is a real score, so its output is finite. Batch row 1 keeps
// every key; row 2 masks every key (NaN on both devices, 0 / 0).
TEST_F(OpsOnGpu, FlashAttentionWithAMinusInfinityFillOverARowsFirstTileOfKeys) {
  const int64_t B = 3, H = 2, Tq = 40, Tk = 80, dk = 64;
  std::vector<int32_t> keep(static_cast<size_t>(B * Tk), 1);
  for (int64_t j = 0; j < 64; ++j) keep[static_cast<size_t>(j)] = 0;
  for (int64_t j = 0; j < Tk; ++j) keep[static_cast<size_t>(2 * Tk + j)] = 0;
  AttentionMasks cpu_masks;
  cpu_masks.key_keep = Tensor::from_ids(Dims{B, Tk}, keep);
  cpu_masks.fill = -std::numeric_limits<float>::infinity();
  const AttentionMasks gpu_masks = masks_on_gpu(cpu_masks);
  const Tensor q = random_tensor(Dims{B, H, Tq, dk}, 901, 1.f), k = random_tensor(Dims{B, H, Tk, dk}, 902, 1.f);
  const Tensor v = random_tensor(Dims{B, H, Tk, dk}, 903), dout = random_tensor(Dims{B, H, Tq, dk}, 904);
  // Batch rows 0 and 1 (finite on the CPU), and row 2 (NaN wherever the CPU has NaN).
  const auto check = [&](const Tensor& cpu, const Tensor& on_gpu, const std::string& what, double tol) {
    expect_close(cpu.narrow(0, 0, 2).contiguous(), on_gpu.narrow(0, 0, 2).contiguous(), what, tol);
    const std::vector<float> c = cpu.narrow(0, 2, 1).contiguous().to_vector();
    const std::vector<float> g = on_gpu.narrow(0, 2, 1).contiguous().to_vector();
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(std::isnan(c[i]), std::isnan(g[i])) << what << ": the fully masked row at " << i;
  };
  const AttentionDropoutSpec none{};
  Tensor probs_c;
  const Tensor out_c = attention_forward(q, k, v, cpu_masks, none, &probs_c);
  for (float x : out_c.narrow(0, 0, 2).contiguous().to_vector()) ASSERT_TRUE(std::isfinite(x)) << "the CPU's output";
  AttentionSaved saved;
  const Tensor out_g = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, none, &saved, false);
  check(out_c, out_g, "float32 flash forward, -inf fill", kTol);
  check(out_c, attention_forward(gpu(q), gpu(k), gpu(v), gpu_masks, none, nullptr, true), "float32 inference", kTol);
  // The gradients of the rows with a finite output (row 2's are NaN on the CPU).
  const AttentionMasks cpu_two = [&] {
    AttentionMasks m = cpu_masks;
    m.key_keep = cpu_masks.key_keep.narrow(0, 0, 2).contiguous();
    return m;
  }();
  const AttentionMasks gpu_two = masks_on_gpu(cpu_two);
  const auto first_two = [](const Tensor& t) { return t.narrow(0, 0, 2).contiguous(); };
  Tensor probs_two;
  attention_forward(first_two(q), first_two(k), first_two(v), cpu_two, none, &probs_two);
  AttentionSaved saved_two;
  attention_forward_saving(gpu(first_two(q)), gpu(first_two(k)), gpu(first_two(v)), gpu_two, none, &saved_two, false);
  for (int which = 0; which < 3; ++which)
    expect_backward_close(which == 0 ? first_two(q).shape() : first_two(k).shape(), [&](Device d, Tensor* s) {
      Tensor* slots[3] = {nullptr, nullptr, nullptr};
      slots[which] = s;
      if (d == kGpu)
        attention_backward(gpu(first_two(dout)), gpu(first_two(q)), gpu(first_two(k)), gpu(first_two(v)), saved_two,
                           gpu_two, none, slots[0], slots[1], slots[2]);
      else
        attention_backward(first_two(dout), first_two(q), first_two(k), first_two(v), probs_two, cpu_two, none,
                           slots[0], slots[1], slots[2]);
    }, std::string("float32 flash backward, -inf fill, d") + "qkv"[which]);
  if (!kernels::cuda::flash_bf16_supported()) return;
  const auto rounded = [](const Tensor& t) { return t.to(DType::BF16).to(DType::F32); };
  const Tensor out_rounded = attention_forward(rounded(q), rounded(k), rounded(v), cpu_masks, none, nullptr, true);
  for (const char* form : {"0", "1"}) {
    const ScopedEnv kernel_form("QKV_FLASH_MMA", form);
    const ProductPrecisionScope bf16(Precision::BF16);
    AttentionSaved saved_bf16;
    const Tensor out_bf16 = attention_forward_saving(gpu(q), gpu(k), gpu(v), gpu_masks, none, &saved_bf16, false);
    EXPECT_TRUE(saved_bf16.bf16);
    check(out_rounded, out_bf16, std::string("bf16 flash forward (QKV_FLASH_MMA=") + form + "), -inf fill", 1e-2);
  }
}

TEST_F(OpsOnGpu, MappedAttentionReadsTheRowsTheMapNames) {
  const int64_t B = 3, Bk = 4, H = 2, Tk = 6, dk = 8;
  const Tensor q = random_tensor(Dims{B, H, 1, dk}, 37), k = random_tensor(Dims{Bk, H, Tk, dk}, 38);
  const Tensor v = random_tensor(Dims{Bk, H, Tk, dk}, 39);
  std::vector<int32_t> rows;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Tk; ++j) rows.push_back(static_cast<int32_t>((b + j) % Bk));
  const Tensor key_rows = Tensor::from_ids(Dims{B, Tk}, rows);
  expect_close(attention_forward_mapped(q, k, v, key_rows, {}, nullptr),
               attention_forward_mapped(gpu(q), gpu(k), gpu(v), gpu(key_rows), {}, nullptr), "mapped attention");
}

// The multi-tensor Adam: more tensors than one launch takes (36), one tensor longer than one launch's
// chunks (256 x 65,536 elements), a tensor of one element; AdamW's decay on some of them. Each
// element goes through the single-tensor kernel's code, so the bits are those of one call a tensor;
// the CPU's steps agree within the suite's tolerance.
TEST_F(OpsOnGpu, AdamOnManyTensorsIsOneCallATensor) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(1 + 997 * i);
  sizes.push_back((int64_t{1} << 16) * 300 + 5);
  const AdamScalars s{0.9f, 0.1f, 0.999f, 0.001f, 1e-3f, 0.0316f, 1e-8f, 0.f};
  std::vector<Tensor> cpu_p, one_p, many_p, cpu_m, one_m, many_m, cpu_v, one_v, many_v, grads;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Tensor p = random_tensor(Dims{sizes[i]}, 50 + static_cast<uint32_t>(i));
    grads.push_back(random_tensor(Dims{sizes[i]}, 150 + static_cast<uint32_t>(i), 0.01f));
    cpu_p.push_back(p.clone());
    one_p.push_back(gpu(p));
    many_p.push_back(gpu(p));
    for (auto* m : {&cpu_m, &cpu_v}) m->push_back(Tensor::zeros(Dims{sizes[i]}));
    for (auto* m : {&one_m, &one_v, &many_m, &many_v}) m->push_back(Tensor::zeros(Dims{sizes[i]}, DType::F32, kGpu));
  }
  std::vector<Tensor> gpu_grads;
  for (const Tensor& g : grads) gpu_grads.push_back(gpu(g));
  for (int step = 0; step < 3; ++step) {
    AdamScalars shared = s;
    shared.weight_decay = step == 2 ? 0.01f : 0.f;  // Adam's L2 term, shared by every tensor of the call
    std::vector<AdamTensors> all;
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamScalars own = shared;
      own.param_scale = i % 3 == 0 ? 0.999f : 1.f;
      adam_step(cpu_p[i], grads[i], cpu_m[i], cpu_v[i], own);
      // A launch a tensor in the kernel's first form (an element a thread), against every tensor in a
      // few launches in the default form (four elements a thread through 16-byte loads): the same bits.
      const ScopedEnv first_form("QKV_CUDA_ADAM_SCALAR", "1");
      adam_step(one_p[i], gpu_grads[i], one_m[i], one_v[i], own);
      all.push_back({&many_p[i], &gpu_grads[i], &many_m[i], &many_v[i], own.param_scale});
    }
    adam_step_many(all, shared);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string what = "tensor " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " elements";
    EXPECT_EQ(one_p[i].to_vector(), many_p[i].to_vector()) << what;
    EXPECT_EQ(one_m[i].to_vector(), many_m[i].to_vector()) << what;
    EXPECT_EQ(one_v[i].to_vector(), many_v[i].to_vector()) << what;
    if (i % 8 == 0 || i + 1 == sizes.size()) {
      expect_close(cpu_p[i], many_p[i], "adam param, " + what);
      expect_close(cpu_m[i], many_m[i], "adam first moment, " + what);
    }
  }
  // A parameter 4 bytes into its buffer (a view, not 16-byte aligned): its blocks take the element-a-
  // thread loop of the default form, with the aligned copy's bits.
  const int64_t n = 1001;
  const Tensor start = random_tensor(Dims{n}, 77), grad = gpu(random_tensor(Dims{n}, 78, 0.01f));
  Tensor buffer = gpu(random_tensor(Dims{n + 1}, 79));
  Tensor offset = buffer.slice0(1, n + 1), aligned = gpu(start);
  offset.copy_from(gpu(start));
  Tensor m1 = Tensor::zeros(Dims{n}, DType::F32, kGpu), v1 = Tensor::zeros(Dims{n}, DType::F32, kGpu);
  Tensor m2 = Tensor::zeros(Dims{n}, DType::F32, kGpu), v2 = Tensor::zeros(Dims{n}, DType::F32, kGpu);
  ASSERT_NE(reinterpret_cast<uintptr_t>(offset.f32()) % 16, 0u) << "the view is meant to be unaligned";
  for (int step = 0; step < 2; ++step) {
    adam_step_many({{&offset, &grad, &m1, &v1}}, s);
    adam_step_many({{&aligned, &grad, &m2, &v2}}, s);
  }
  EXPECT_EQ(offset.to_vector(), aligned.to_vector()) << "an unaligned parameter";
  EXPECT_EQ(v1.to_vector(), v2.to_vector()) << "an unaligned parameter";
}

// A search step's candidates on the GPU: the same entries and ids as the CPU's reference, with
// ties (scores rounded to a coarse grid), -inf runs (forbidden ids), a row with fewer finite entries
// than asked, rows of -inf or NaN alone (nothing to take: -inf and id -1), NaN among finite scores,
// rows longer and shorter than a block's threads.
TEST_F(OpsOnGpu, TopOfRowsIsTheCpus) {
  constexpr float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t V : {int64_t{5}, int64_t{300}, int64_t{58101}})
    for (const int64_t k : {int64_t{1}, int64_t{8}, int64_t{11}, max_top_of_rows()}) {
      Tensor x = random_tensor(Dims{9, V}, 60 + static_cast<uint32_t>(k), 4.f);
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::round(x.f32()[i] * 8.f) / 8.f;  // many ties
      for (int64_t c = 0; c < V; c += 3) x.f32()[c] = -kInf;
      for (int64_t c = 0; c < V; ++c) {
        if (c != V / 2) x.f32()[5 * V + c] = -kInf;  // one entry left
        x.f32()[6 * V + c] = -kInf;
        x.f32()[7 * V + c] = kNaN;
        if (c % 2 == 1) x.f32()[8 * V + c] = kNaN;
      }
      const auto [values, ids] = top_of_rows(x, k);
      const auto [values_gpu, ids_gpu] = top_of_rows(gpu(x), k);
      const std::string what = "top " + std::to_string(k) + " of " + std::to_string(V);
      EXPECT_EQ(ids.to_ids(), ids_gpu.to(Device::cpu()).to_ids()) << what;
      EXPECT_EQ(values.to_vector(), values_gpu.to_vector()) << what;
    }
}

TEST_F(OpsOnGpu, OptimizerAndInPlaceUpdates) {
  const Tensor p0 = random_tensor(Dims{1000}, 40), g0 = random_tensor(Dims{1000}, 41);
  Tensor p = p0.clone(), m = Tensor::zeros(Dims{1000}), v = Tensor::zeros(Dims{1000});
  Tensor pg = gpu(p0), mg = Tensor::zeros(Dims{1000}, DType::F32, kGpu), vg = Tensor::zeros(Dims{1000}, DType::F32, kGpu);
  const AdamScalars s{0.9f, 0.1f, 0.98f, 0.02f, 1e-3f, 0.1f, 1e-9f, 0.01f};
  for (int step = 0; step < 3; ++step) {
    adam_step(p, g0, m, v, s);
    adam_step(pg, gpu(g0), mg, vg, s);
  }
  expect_close(p, pg, "adam param");
  expect_close(v, vg, "adam second moment");
  scale_inplace(p, 0.5f);
  scale_inplace(pg, 0.5f);
  add_inplace(p, g0);
  add_inplace(pg, gpu(g0));
  expect_close(p, pg, "scale and add in place");
  EXPECT_NEAR(sum_of_squares(p), sum_of_squares(pg), 1e-9 * sum_of_squares(p));
  EXPECT_NEAR(sum_of_squares(std::vector<Tensor>{p, g0, v}), sum_of_squares(std::vector<Tensor>{pg, gpu(g0), vg}),
              1e-9 * sum_of_squares(p));
}

TEST_F(OpsOnGpu, MasksPositionsAndRows) {
  const Tensor ids = random_ids(Dims{4, 9}, 5, 42);
  EXPECT_EQ(keep_mask(ids, 0).to_ids(), keep_mask(gpu(ids), 0).to_ids());
  const Tensor x = random_tensor(Dims{2, 7, 12}, 43), table = sinusoidal_table(20, 12);
  expect_equal(add_positional_forward(x, table), add_positional_forward(gpu(x), gpu(table)), "positional");
  expect_equal(gather_rows(x, {1, 0, 1}), gather_rows(gpu(x), {1, 0, 1}), "gather rows");
  // Beam search's reorderings in one launch per 512 rows: more rows than one launch carries, ids,
  // and a key/value cache's first `length` positions (the rest is never read, and left unset).
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 700; ++i) many.push_back((i * 37 + 5) % 300);
  const Tensor rows_of_ids = random_ids(Dims{300, 5}, 50, 45);
  EXPECT_EQ(gather_rows(rows_of_ids, many).to_ids(), gather_rows(gpu(rows_of_ids), many).to_ids());
  const Tensor rows_of_bf16 = random_tensor(Dims{300, 7}, 47).to(DType::BF16);  // 2-byte elements, odd rows
  expect_equal(gather_rows(rows_of_bf16, many).to(DType::F32), gather_rows(gpu(rows_of_bf16), many).to(DType::F32),
               "bf16 rows");
  const Tensor cache = random_tensor(Dims{300, 3, 10, 8}, 46);
  for (const int64_t length : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{10}}) {
    const Tensor a = gather_cache_rows(cache, many, length), b = gather_cache_rows(gpu(cache), many, length);
    expect_equal(a.narrow(2, 0, length).contiguous(), b.narrow(2, 0, length).contiguous(),
                 "cache rows, length " + std::to_string(length));
  }
  expect_equal(combine_heads(split_heads(x, 3)), combine_heads(split_heads(gpu(x), 3)), "heads");
  const Tensor s = random_tensor(Dims{2, 2, 7, 7}, 44);
  AttentionMasks m;
  m.causal = true;
  expect_equal(masked_fill_forward(s, m), masked_fill_forward(gpu(s), m), "masked fill");
}

TEST_F(OpsOnGpu, ADeviceIndexPastTheLastIsRefused) {
  const Device past = Device::cuda(cuda::device_count());
  try {
    (void)random_tensor(Dims{2}, 1).to(past);
    FAIL() << past.name() << " does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

// A fault the GPU keeps (a kernel writing where no allocation is) fails every later call of the
// process: cuda::device_fault names it (the server's /health then answers 503), later calls throw
// DeviceError (500, not a 400 of bad input, nor the 503 of an allocation that found no room). In a
// child process (a death test), since the fault would fail every test after it here.
TEST_F(OpsOnGpu, AFaultTheGpuKeepsIsNamedAndLaterCallsThrowDeviceErrors) {
  EXPECT_EQ(cuda::device_fault(kGpu), "");
  EXPECT_EQ(cuda::device_fault(Device::cpu()), "");
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child runs this test afresh: CUDA starts anew
  EXPECT_EXIT(
      {
        const Tensor from = Tensor::zeros(Dims{1 << 16}, DType::F32, kGpu);
        cuda::copy_strided(reinterpret_cast<void*>(uintptr_t{64}), Dims{1}, from.data<float>(), Dims{1}, Dims{1 << 16}, 4);
        try {
          cuda::synchronize(kGpu);
        } catch (const DeviceError&) {  // where the fault shows first
        }
        const std::string fault = cuda::device_fault(kGpu);
        std::string later = "none";
        try {
          (void)Tensor::zeros(Dims{1 << 20}, DType::F32, kGpu);
          cuda::synchronize(kGpu);
        } catch (const OutOfMemoryError&) {
          later = "OutOfMemoryError";
        } catch (const DeviceError&) {
          later = "DeviceError";
        } catch (const std::exception&) {
          later = "another error";
        }
        std::fprintf(stderr, "fault [%s]; a later call threw %s\n", fault.c_str(), later.c_str());
        std::_Exit(!fault.empty() && later == "DeviceError" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "fault \\[cuda:0: .+\\]; a later call threw DeviceError");
}

TEST_F(OpsOnGpu, MixedDevicesAndExhaustedMemoryAreClearErrors) {
  const Tensor a = random_tensor(Dims{4, 4}, 45);
  try {
    (void)add_forward(a, gpu(a));
    FAIL() << "an op on tensors of two devices must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
  const PoolStats before = BufferPool::stats(kGpu);
  try {
    (void)Tensor::empty(Dims{int64_t{1} << 40}, DType::F32, kGpu);  // 4 TiB
    FAIL() << "4 TiB cannot fit on a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cuda:0: asked for"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB free of"), std::string::npos) << e.what();
  }
  // The failed request is not counted: neither live nor in the peak (which bounds the idle buffers).
  const PoolStats after_failure = BufferPool::stats(kGpu);
  EXPECT_EQ(after_failure.bytes_live, before.bytes_live);
  EXPECT_EQ(after_failure.bytes_peak, before.bytes_peak);
  EXPECT_EQ(after_failure.system_allocs, before.system_allocs);
  const Tensor after = gelu_forward(gpu(a));  // the device still works
  expect_close(gelu_forward(a), after, "gelu after an exhausted allocation");
}

}  // namespace
}  // namespace qkv::ops
