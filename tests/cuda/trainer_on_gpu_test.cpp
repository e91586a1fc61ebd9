// The library Trainer on a GPU (what `qkv train --device cuda` runs): a run saved at step 3 and
// resumed onto the GPU (the optimizer's moments read back onto the device, the data order and
// dropout counters restored) ends where an uninterrupted GPU run ends, and near the CPU's run of the
// same seed; each checkpoint written from the GPU loads on the CPU. The embedding's backward sums
// repeated ids with atomics on a GPU (last bits vary from run to run), and Adam turns a near-zero
// gradient's rounding into a step of up to lr, so the runs are compared by their loss on a fixed
// batch, not weight by weight.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "qkv/core/cuda_runtime.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/objective.h"
#include "qkv/train/step.h"
#include "qkv/train/trainer.h"
#include "qkv/train/training_data.h"
#include "train/tiny_translation.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

const Device kGpu = Device::cuda(0);

std::string run_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_trainer_gpu_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  return d;
}

// The loss of the checkpoint in `dir`, loaded on the CPU, on a batch of the copy task the runs never
// saw (another seed), in eval mode (no dropout).
float held_out_loss(const std::string& dir) {
  const std::unique_ptr<models::Transformer> model = models::load_seq2seq(dir);
  model->eval();
  SyntheticData held_out("copy", 8, 6, 20, 1234);
  return forward_backward(*model, teacher_forcing(), held_out.next(), 0.f).loss;
}

TEST(TrainerOnGpu, AResumedRunEndsWhereAnUninterruptedOneDoesAndNearTheCpus) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const std::string full = run_dir("full"), split = run_dir("split"), on_cpu = run_dir("cpu");
  EXPECT_EQ(train_copy_task(full, 8, false, 1e-3, 0, {"constant", 0, 1, 16}, kGpu).step, 8);
  EXPECT_EQ(train_copy_task(split, 3, false, 1e-3, 0, {"constant", 0, 1, 16}, kGpu).step, 3);
  EXPECT_EQ(train_copy_task(split, 8, true, 1e-3, 0, {"constant", 0, 1, 16}, kGpu).step, 8);
  EXPECT_EQ(train_copy_task(on_cpu, 8, false).step, 8);
  const float untrained = [] {
    models::Transformer fresh(tiny_translation_config(), 5);
    fresh.eval();
    SyntheticData held_out("copy", 8, 6, 20, 1234);
    return forward_backward(fresh, teacher_forcing(), held_out.next(), 0.f).loss;
  }();
  const float l_full = held_out_loss(full), l_split = held_out_loss(split), l_cpu = held_out_loss(on_cpu);
  std::printf("held-out loss: untrained %.6f, GPU %.6f, GPU resumed %.6f, CPU %.6f\n", untrained, l_full, l_split,
              l_cpu);
  EXPECT_LT(l_full, untrained) << "8 steps on the GPU should have trained";
  EXPECT_NEAR(l_split, l_full, 1e-4 * std::fabs(l_full)) << "resumed on the GPU against uninterrupted";
  EXPECT_NEAR(l_full, l_cpu, 1e-3 * std::fabs(l_cpu)) << "the GPU's run against the CPU's";
  for (const std::string& d : {full, split, on_cpu}) fs::remove_all(d);
}

}  // namespace
}  // namespace qkv::train
