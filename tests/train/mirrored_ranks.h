// Two ranks in one process, for tests of what data parallelism does to the gradients without MPI:
// a communicator whose "other rank" holds the same values, so a sum doubles every element (exactly,
// in float) and a max leaves it, its twin for sums on a GPU, and the check that GradientReducer's
// buckets carry every gradient out and back (host or GPU) on them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/cuda_runtime.h"
#include "qkv/data/batcher.h"
#include "qkv/dist/communicator.h"
#include "qkv/dist/nccl.h"
#include "qkv/models/transformer.h"
#include "qkv/train/grad_sync.h"
#include "qkv/train/objective.h"
#include "qkv/train/step.h"

namespace qkv::testing {

class MirrorCommunicator final : public dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string describe() const override { return "two mirrored ranks in one process"; }
  void allreduce_sum(float* data, int64_t n) override {
    summed_floats += n;
    for (int64_t i = 0; i < n; ++i) data[i] += data[i];
  }
  void allreduce_sum(double* data, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) data[i] += data[i];
  }
  void allreduce_max(int64_t*, int64_t) override {}
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  std::vector<double> gather(const std::vector<double>& values, const std::string&) override {
    std::vector<double> both = values;
    both.insert(both.end(), values.begin(), values.end());
    return both;
  }

  int64_t summed_floats = 0;  // floats given to allreduce_sum
};

// The same second rank for buckets kept on a GPU (GradientReducer::sum_on_device): each sum doubles
// the floats, through the host (a test double for NCCL's sums, which need a GPU per rank).
class MirrorOnDevice final : public dist::DeviceAllReduce {
 public:
  explicit MirrorOnDevice(Device device) : device_(device) {}
  Device device() const override { return device_; }
  void allreduce_sum(float* data, int64_t n) override {
    summed_floats += n;
    std::vector<float> host(static_cast<size_t>(n));
    cuda::copy(host.data(), Device::cpu(), data, device_, host.size() * sizeof(float));
    for (float& x : host) x += x;
    cuda::copy(data, device_, host.data(), Device::cpu(), host.size() * sizeof(float));
  }
  std::string describe() const override { return "two mirrored ranks on " + device_.name(); }

  int64_t summed_floats = 0;

 private:
  Device device_;
};

// One training step of `config`'s model on `device`, whole batch and micro-batches of 4 rows, once
// alone and once with a GradientReducer over a MirrorCommunicator and buckets of 4 KB (most start
// during backward): every gradient must end as `factor` times the one process's (2: the mirror
// doubles them), on the model's device, within `tolerance` of the largest element (0: exactly; a
// gradient copied to the wrong place would be off by its size). With `on_device`, the buckets stay
// on the GPU and it sums them (MirrorOnDevice: twice; a one-rank NcclGroup: once).
inline void expect_buckets_carry_every_gradient(const models::TransformerConfig& config, const data::Batch& batch,
                                                Device device, double tolerance,
                                                dist::DeviceAllReduce* on_device = nullptr, double factor = 2.0) {
  for (const int64_t micro : {int64_t{0}, int64_t{4}}) {
    models::Transformer alone(config, 9), ranked(config, 9);
    for (models::Model* m : {static_cast<models::Model*>(&alone), static_cast<models::Model*>(&ranked)}) {
      m->to(device);
      m->train();
    }
    train::forward_backward(alone, train::teacher_forcing(), batch, 0.1f, micro);
    MirrorCommunicator mirror;
    train::GradientReducer reducer(ranked.parameters(), mirror, 4096);
    reducer.sum_on_device(on_device);
    train::StepOptions o;
    o.label_smoothing = 0.1f;
    o.micro_batch_rows = micro;
    o.reducer = &reducer;
    auto* twin = dynamic_cast<MirrorOnDevice*>(on_device);
    const int64_t twin_summed_before = twin ? twin->summed_floats : 0;  // it counts over both passes
    train::forward_backward(ranked, train::teacher_forcing(), batch, o);
    int64_t parameters = 0;
    for (const Var& p : ranked.parameters()) parameters += p.value().numel();
    EXPECT_EQ(mirror.summed_floats, on_device ? 0 : parameters) << "floats summed through the host";
    if (twin) {
      EXPECT_EQ(twin->summed_floats - twin_summed_before, parameters) << "floats summed on the device";
    }
    EXPECT_GT(reducer.stats().buckets, 4);
    EXPECT_GT(reducer.stats().started_in_backward, 0);
    const auto a = alone.parameters(), b = ranked.parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].grad().defined(), b[i].grad().defined()) << "parameter " << i;
      if (!a[i].grad().defined()) continue;
      ASSERT_EQ(b[i].grad().device(), device) << "parameter " << i;
      const std::vector<float> once = a[i].grad().to_vector(), summed = b[i].grad().to_vector();
      ASSERT_EQ(once.size(), summed.size()) << "parameter " << i;
      double scale = 0, diff = 0;
      for (size_t j = 0; j < once.size(); ++j) {
        scale = std::max(scale, std::fabs(factor * once[j]));
        diff = std::max(diff, std::fabs(static_cast<double>(summed[j]) - factor * once[j]));
      }
      EXPECT_LE(diff, tolerance * scale) << "micro-batch " << micro << ", parameter " << i;
    }
  }
}

}  // namespace qkv::testing
