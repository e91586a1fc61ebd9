// Data-parallel training's gradient buckets with the model on a GPU (train/grad_sync.h: the
// gradients copied to host buckets, summed there, copied back): against a second rank that holds
// the same gradients, every GPU gradient ends as twice one process's, for the whole batch and for
// micro-batches (whose sums are added on the GPU first), with buckets small enough that most start
// while backward is still queuing work on the device.
#include <gtest/gtest.h>

#include "qkv/core/cuda_runtime.h"
#include "qkv/data/synthetic.h"
#include "train/mirrored_ranks.h"

namespace qkv {
namespace {

TEST(DataParallelOnGpu, BucketsCarryEveryGradientOutAndBack) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  models::TransformerConfig config;
  config.src_vocab_size = config.tgt_vocab_size = 30;
  config.d_model = 32;
  config.num_heads = 4;
  config.num_layers = 2;
  config.d_ff = 64;
  config.max_seq_length = 24;
  config.dropout = 0.1f;
  const data::SyntheticBatch copy = data::synthetic_batch("copy", 6, 12, 30, 3, 0);
  data::Batch batch;
  batch.src = copy.src;
  batch.tgt = copy.tgt;
  // Two runs of one GPU model may add an embedding's scatter in another order: within rounding.
  testing::expect_buckets_double_every_gradient(config, batch, Device::cuda(0), 1e-5);
}

}  // namespace
}  // namespace qkv
