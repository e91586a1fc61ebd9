// Whole models train on a GPU as on the CPU: each family (seed 000's encoder-decoder, a GPT, a BERT
// with its masked-LM head) built from one seed on both devices, trained 10 Adam steps with dropout
// and label smoothing on the same batch. The dropout masks are the CPU's bit for bit, so the losses
// of every step agree within 1e-4 (relative), and the first step's gradients within 1e-4 of each
// parameter's largest gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "qkv/core/cuda_runtime.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/adam.h"
#include "qkv/train/objective.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

const Device kGpu = Device::cuda(0);

models::TransformerConfig sized(models::TransformerConfig c, int64_t vocab) {
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 24;
  c.dropout = 0.1f;
  return c;
}

struct Family {
  std::string name;
  models::TransformerConfig config;
  const train::Objective* objective;
  data::Batch batch;
};

data::Batch masked_lm_batch(int64_t B, int64_t T, int32_t vocab) {
  std::mt19937 gen(5);
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), labels(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = 7 + static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab - 7));
    if (gen() % 5 == 0) labels[i] = ids[i];
  }
  data::Batch b;
  b.tgt = Tensor::from_ids(Dims{B, T}, ids);
  b.labels = Tensor::from_ids(Dims{B, T}, labels);
  return b;
}

data::Batch pairs_batch(const Tensor& src, const Tensor& tgt) {
  data::Batch b;
  b.src = src;
  b.tgt = tgt;
  return b;
}

std::vector<Family> families() {
  std::vector<Family> out;
  const data::SyntheticBatch copy = data::synthetic_batch("copy", 6, 12, 30, 3, 0);
  out.push_back({"seed000", sized(models::TransformerConfig{}, 30), &train::teacher_forcing(),
                 pairs_batch(copy.src, copy.tgt)});
  models::TransformerConfig gpt = sized(models::decoder_only_defaults(), 30);
  gpt.bos_id = gpt.eos_id = 1;
  out.push_back({"gpt", gpt, &train::teacher_forcing(), pairs_batch(Tensor(), copy.tgt)});
  models::TransformerConfig bert = sized(models::encoder_only_defaults(), 40);
  bert.pad_id = 0;
  bert.cls_id = 4;
  bert.sep_id = 5;
  bert.mask_id = 6;
  bert.mlm_head = true;
  out.push_back({"bert", bert, &train::masked_lm(), masked_lm_batch(5, 14, 40)});
  return out;
}

// max |a - b| <= tol * max |a| over a parameter's gradient; noise-sized gradients (a key bias's,
// which softmax ignores) are skipped, as the CPU's own agreement tests do.
void expect_gradients_close(const models::Model& cpu, const models::Model& gpu, const std::string& what) {
  const auto a = cpu.named_parameters(), b = gpu.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].second.grad().defined()) continue;
    ASSERT_EQ(b[i].second.value().device(), kGpu) << a[i].first;
    const std::vector<float> ga = a[i].second.grad().to_vector(), gb = b[i].second.grad().to_vector();
    double scale = 0, diff = 0;
    for (size_t j = 0; j < ga.size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(ga[j])));
      diff = std::max(diff, static_cast<double>(std::fabs(ga[j] - gb[j])));
    }
    if (scale < 1e-6) continue;
    EXPECT_LE(diff, 1e-4 * scale) << what << ": gradient of " << a[i].first;
  }
}

TEST(ModelsOnGpu, EveryFamilyTrainsAsOnTheCpu) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  for (const Family& f : families()) {
    const auto cpu = models::make_model(f.config, 7), gpu = models::make_model(f.config, 7);
    gpu->to(kGpu);
    ASSERT_EQ(gpu->device(), kGpu) << f.name;
    cpu->train();
    gpu->train();
    train::AdamOptions options;
    options.lr = 1e-3;
    train::Adam opt_cpu(cpu->named_parameters(), options), opt_gpu(gpu->named_parameters(), options);
    for (int step = 0; step < 10; ++step) {
      opt_cpu.zero_grad();
      opt_gpu.zero_grad();
      const float loss_cpu = train::forward_backward(*cpu, *f.objective, f.batch, 0.1f).loss;
      const float loss_gpu = train::forward_backward(*gpu, *f.objective, f.batch, 0.1f).loss;
      EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << f.name << " step " << step;
      if (step == 0) expect_gradients_close(*cpu, *gpu, f.name);
      opt_cpu.step();
      opt_gpu.step();
    }
    // Back on the host, the trained GPU model is an ordinary CPU model.
    gpu->to(Device::cpu());
    EXPECT_EQ(gpu->device(), Device::cpu()) << f.name;
  }
}

}  // namespace
}  // namespace qkv
