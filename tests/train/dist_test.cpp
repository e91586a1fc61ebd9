// The one-process side of data parallelism (the MPI runs themselves are tests/mpi/): a chunked
// step gives each row the dropout mask of the whole batch, and the gradients of two shares of a
// batch, computed apart and added, are bit for bit those of one process running the batch in
// micro-batches of those shares, which is what two ranks and their all-reduce compute.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/data/synthetic.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/dist/communicator.h"
#include "qkv/dist/nccl.h"
#include "qkv/dist/mpi.h"
#include "qkv/models/transformer.h"
#include "qkv/train/memory_budget.h"
#include "qkv/train/step.h"
#include "error_message.h"
#include "train/mirrored_ranks.h"

namespace qkv::train {
namespace {

models::TransformerConfig config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 24;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 16;
  c.dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.ffn_dropout = 0.1f;
  return c;
}

data::Batch batch() {
  const data::SyntheticBatch s = data::synthetic_batch("copy", 6, 10, 24, 11, 0);  // rows of several lengths
  data::Batch b;
  b.src = s.src;
  b.tgt = s.tgt;
  return b;
}

std::vector<std::vector<float>> grads(const models::Model& m) {
  std::vector<std::vector<float>> g;
  for (const Var& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<float>());
  return g;
}

TEST(DistStep, MicroBatchesDrawTheWholeBatchsDropoutMasks) {
  std::vector<std::vector<float>> g[2];
  uint64_t offsets[2] = {};
  for (int micro = 0; micro < 2; ++micro) {
    models::Transformer model(config(), 9);
    model.train();
    forward_backward(model, teacher_forcing(), batch(), 0.1f, micro ? 4 : 0);
    g[micro] = grads(model);
    offsets[micro] = model.generator().offset();
  }
  EXPECT_EQ(offsets[0], offsets[1]) << "the step must end where the whole batch ends";
  // Same masks: the gradients agree up to summation order (different masks would differ by ~1e-1).
  for (size_t i = 0; i < g[0].size(); ++i) {
    double diff = 0, scale = 1e-12;
    for (size_t j = 0; j < g[0][i].size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(g[0][i][j] - g[1][i][j])));
      scale = std::max(scale, static_cast<double>(std::fabs(g[0][i][j])));
    }
    if (scale > 1e-6) {
      EXPECT_LE(diff / scale, 1e-4) << "parameter " << i;
    }
  }
}

TEST(DistStep, SharesComputedApartAndAddedEqualMicroBatchesExactly) {
  const data::Batch b = batch();
  models::Transformer whole(config(), 9), first(config(), 9), second(config(), 9);
  for (models::Model* m : {static_cast<models::Model*>(&whole), static_cast<models::Model*>(&first),
                           static_cast<models::Model*>(&second)})
    m->train();
  const StepResult r = forward_backward(whole, teacher_forcing(), b, 0.1f, 3);
  StepOptions o;
  o.label_smoothing = 0.1f;
  o.row_begin = 0;
  o.row_end = 3;
  const StepResult r0 = forward_backward(first, teacher_forcing(), b, o);  // "rank 0"
  o.row_begin = 3;
  o.row_end = -1;
  const StepResult r1 = forward_backward(second, teacher_forcing(), b, o);  // "rank 1"
  EXPECT_EQ(r.target_tokens, r0.target_tokens);
  EXPECT_FLOAT_EQ(r.loss, r0.loss + r1.loss);  // each a share of the whole batch's mean
  EXPECT_EQ(first.generator().offset(), whole.generator().offset());
  EXPECT_EQ(second.generator().offset(), whole.generator().offset());
  const auto gw = grads(whole), g0 = grads(first), g1 = grads(second);
  for (size_t i = 0; i < gw.size(); ++i) {
    ASSERT_EQ(gw[i].size(), g0[i].size());
    for (size_t j = 0; j < gw[i].size(); ++j) ASSERT_EQ(gw[i][j], g0[i][j] + g1[i][j]) << "parameter " << i << "[" << j << "]";
  }
}

// GradientReducer's buckets against a second rank holding the same gradients: every gradient ends
// exactly twice one process's (tests/cuda/data_parallel_on_gpu_test.cpp: the same on a GPU).
TEST(DistStep, BucketsCarryEveryGradientOutAndBack) {
  testing::expect_buckets_carry_every_gradient(config(), batch(), Device::cpu(), 0.0);
}

// --allreduce nccl needs a GPU per rank: ranks sharing one, or on the CPU, are refused before NCCL
// is called (it would stop with "Duplicate GPU detected"), naming the ranks.
TEST(DistNccl, RanksSharingAGpuAreRefusedByName) {
  EXPECT_NO_THROW(check_gpu_per_rank({{1.0, 0}, {1.0, 1}, {2.0, 0}}));  // two GPUs of host 1, one of host 2
  const std::string shared =
      test_support::error_message_of([] { check_gpu_per_rank({{1.0, 0}, {2.0, 0}, {1.0, 0}}); });
  EXPECT_NE(shared.find("ranks 0 and 2 share GPU cuda:0"), std::string::npos) << shared;
  EXPECT_NE(shared.find("--allreduce mpi"), std::string::npos) << shared;
  const std::string cpu = test_support::error_message_of([] { check_gpu_per_rank({{1.0, 0}, {1.0, -1}}); });
  EXPECT_NE(cpu.find("rank 1 trains on the CPU"), std::string::npos) << cpu;
}

// Where NCCL cannot run (no CUDA build, no GPU, no libnccl.so.2) asking for it is an error that
// says why, never a crash; a trainer on the CPU refuses --allreduce nccl up front.
TEST(DistNccl, WithoutAGpuTheGroupIsRefusedSayingWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU: tests/cuda checks NCCL there";
  const std::string message =
      test_support::error_message_of([] { dist::NcclGroup group(dist::single_process(), Device::cuda(0)); });
  EXPECT_TRUE(message.find("CUDA") != std::string::npos || message.find("NCCL") != std::string::npos) << message;
  if (!cuda::kBuilt) {
    EXPECT_NE(dist::nccl_unavailable().find("without CUDA"), std::string::npos);
  }
}

TEST(DistCommunicator, OneProcess) {
  dist::Communicator& c = dist::single_process();
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  float x = 2.5f;
  c.allreduce_sum(&x, 1);
  EXPECT_EQ(x, 2.5f);
  EXPECT_EQ(c.gather({1.0, 2.0}, "x"), (std::vector<double>{1.0, 2.0}));
  EXPECT_NO_THROW(dist::check_all_ranks(c, ""));
  EXPECT_THROW(dist::check_all_ranks(c, "data.txt: cannot open"), Error);
  if (!dist::mpi_compiled()) {
    EXPECT_THROW(dist::MpiSession(), Error);
  }
}

}  // namespace
}  // namespace qkv::train
