// Data-parallel training's gradient buckets with the model on a GPU (train/grad_sync.h: the
// gradients copied to host buckets, summed there, copied back; or buckets on the GPU, NCCL's):
// against a second rank that holds the same gradients, every GPU gradient ends as twice one
// process's, for the whole batch and for micro-batches (whose sums are added on the GPU first), with
// buckets small enough that most start while backward is still queuing work on the device.
#include <gtest/gtest.h>

#include "qkv/core/cuda_runtime.h"
#include "qkv/data/synthetic.h"
#include "qkv/dist/nccl.h"
#include "train/mirrored_ranks.h"

namespace qkv {
namespace {

models::TransformerConfig small_config() {
  models::TransformerConfig config;
  config.src_vocab_size = config.tgt_vocab_size = 30;
  config.d_model = 32;
  config.num_heads = 4;
  config.num_layers = 2;
  config.d_ff = 64;
  config.max_seq_length = 24;
  config.dropout = 0.1f;
  return config;
}

data::Batch copy_batch() {
  const data::SyntheticBatch copy = data::synthetic_batch("copy", 6, 12, 30, 3, 0);
  data::Batch batch;
  batch.src = copy.src;
  batch.tgt = copy.tgt;
  return batch;
}

TEST(DataParallelOnGpu, BucketsCarryEveryGradientOutAndBack) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  // Two runs of one GPU model may add an embedding's scatter in another order: within rounding.
  testing::expect_buckets_carry_every_gradient(small_config(), copy_batch(), Device::cuda(0), 1e-5);
}

// Buckets kept on the GPU (GradientReducer::sum_on_device, NCCL's path), summed by a second rank's
// twin: every gradient doubles, none passes through the host's buckets.
TEST(DataParallelOnGpu, BucketsOnTheGpuCarryEveryGradient) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  testing::MirrorOnDevice twin(Device::cuda(0));
  testing::expect_buckets_carry_every_gradient(small_config(), copy_batch(), Device::cuda(0), 1e-5, &twin);
}

// NCCL itself, with the one rank a one-GPU machine can give it (NCCL refuses two ranks on one GPU):
// libnccl.so.2 loads, a communicator forms, a sum of one rank leaves a buffer as it was, and the
// reducer's buckets pass through ncclAllReduce and back to every gradient unchanged.
TEST(DataParallelOnGpu, NcclOfOneRankSumsInPlace) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  if (!dist::nccl_unavailable().empty()) GTEST_SKIP() << "NCCL: " << dist::nccl_unavailable();
  dist::NcclGroup nccl(dist::single_process(), Device::cuda(0));
  EXPECT_EQ(nccl.describe().rfind("NCCL 2.", 0), 0u) << nccl.describe();
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 7.f;
  Tensor x = Tensor::from_vector(Dims{1000}, values).to(Device::cuda(0));
  nccl.allreduce_sum(x.f32(), x.numel());
  EXPECT_EQ(x.to_vector(), values);
  testing::expect_buckets_carry_every_gradient(small_config(), copy_batch(), Device::cuda(0), 1e-5, &nccl, 1.0);
}

}  // namespace
}  // namespace qkv
