// Data-parallel training's gradient buckets with the model on a GPU (train/grad_sync.h: the
// gradients copied to host buckets, summed there, copied back): against a second rank that holds
// the same gradients (tests/train/mirror_communicator.h), every GPU gradient ends as twice one
// process's, for the whole batch and for micro-batches (whose sums are added on the GPU first), with
// buckets small enough that most start while backward is still queuing work on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/core/cuda_runtime.h"
#include "qkv/data/synthetic.h"
#include "qkv/models/transformer.h"
#include "qkv/train/grad_sync.h"
#include "qkv/train/objective.h"
#include "qkv/train/step.h"
#include "train/mirror_communicator.h"

namespace qkv {
namespace {

models::TransformerConfig small_seed_model() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 30;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 24;
  c.dropout = 0.1f;
  return c;
}

TEST(DataParallelOnGpu, BucketsCarryEveryGradientOutAndBack) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const data::SyntheticBatch copy = data::synthetic_batch("copy", 6, 12, 30, 3, 0);
  data::Batch batch;
  batch.src = copy.src;
  batch.tgt = copy.tgt;
  for (const int64_t micro : {int64_t{0}, int64_t{4}}) {
    models::Transformer alone(small_seed_model(), 7), ranked(small_seed_model(), 7);
    for (models::Model* m : {static_cast<models::Model*>(&alone), static_cast<models::Model*>(&ranked)}) {
      m->to(Device::cuda(0));
      m->train();
    }
    train::forward_backward(alone, train::teacher_forcing(), batch, 0.1f, micro);
    testing::MirrorCommunicator mirror;
    train::GradientReducer reducer(ranked.parameters(), mirror, 4096);
    train::StepOptions o;
    o.label_smoothing = 0.1f;
    o.micro_batch_rows = micro;
    o.reducer = &reducer;
    train::forward_backward(ranked, train::teacher_forcing(), batch, o);
    EXPECT_GT(reducer.stats().started_in_backward, 0);
    const auto a = alone.parameters(), b = ranked.parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].grad().defined(), b[i].grad().defined()) << "parameter " << i;
      if (!a[i].grad().defined()) continue;
      ASSERT_EQ(b[i].grad().device(), Device::cuda(0)) << "parameter " << i;
      const std::vector<float> once = a[i].grad().to_vector(), twice = b[i].grad().to_vector();
      // Two runs of one GPU model may add an embedding's scatter in another order: within rounding of
      // the largest element, where a gradient copied to the wrong place would be off by its size.
      double scale = 1e-30, diff = 0;
      for (size_t j = 0; j < once.size(); ++j) {
        scale = std::max(scale, std::fabs(2.0 * once[j]));
        diff = std::max(diff, std::fabs(static_cast<double>(twice[j]) - 2.0 * once[j]));
      }
      EXPECT_LE(diff, 1e-5 * scale) << "micro-batch " << micro << ", parameter " << i;
    }
  }
}

}  // namespace
}  // namespace qkv
