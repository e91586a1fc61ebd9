// The gradients of one training step: accumulation over micro-batches and, in data-parallel
// training, their sum over the ranks in buckets.
//
// Accumulation. Each chunk of rows (micro-batch) runs its backward into fresh gradients, which are
// then added to the sum of the chunks before it: ((g1 + g2) + g3) ... So one process with
// micro-batches of m rows adds exactly the floats that ranks of m rows each add in the all-reduce
// (two ranks: g1 + g2, one addition either way); adding a chunk's backward straight into the running
// sum would round differently (a GEMM with beta = 1, an embedding's scatter-add).
//
// Buckets. The parameters, in reverse order of registration (roughly the order backward finishes
// them), are cut into buckets of about `bucket_bytes`. During the last chunk's backward a hook
// checks, after every node, whether the next bucket's parameters are still referred to by a pending
// node (their gradient cells' use count is back to what it was before the forward pass); when none
// is, their gradients are final: they are added to the earlier chunks' sum, copied into the bucket
// and its all-reduce is started while backward goes on with earlier layers. Buckets are started in
// index order on every rank (MPI's rule for collectives); finish() starts the rest, waits, and
// copies the sums back. A parameter without a gradient on some rank counts as zeros there; one
// without a gradient on every rank keeps none (Adam skips it, as in one process).
//
// GPUs. By default the buckets are host memory and the all-reduce is MPI's: a bucket's gradients are
// copied from the device as it starts and the sums copied back in finish(). The ranks may share a
// GPU or each have their own; each reduction is a copy of the gradient bytes each way over PCIe or
// NVLink. Given a DeviceAllReduce (sum_on_device: NCCL, dist/nccl.h), the buckets live on the GPU
// instead: gradients are copied into them, summed and copied back on the device's stream, queued
// behind backward's kernels, and nothing waits for them on the host.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/autograd/var.h"
#include "qkv/dist/communicator.h"
#include "qkv/dist/nccl.h"

namespace qkv::train {

class GradientReducer {
 public:
  // params: each parameter once (Module::parameters()). comm's size 1: accumulation only.
  GradientReducer(std::vector<Var> params, dist::Communicator& comm, int64_t bucket_bytes = 25 << 20,
                  bool overlap = true);

  // One step: stash() after each chunk but the last whose backward ran; arm() before the last
  // chunk's forward; backward_hook() for a BackwardHookScope around its backward; finish() after it
  // (also when this rank ran no chunk at all). finish() returns the max of `value` over the ranks.
  void stash();
  void arm();
  const std::function<void()>* backward_hook() const { return overlap_ && comm_->size() > 1 ? &hook_ : nullptr; }
  int64_t finish(int64_t value);

  // The buckets' sums on the GPU through `sums` (every parameter must be on its device), from the
  // next step on; nullptr: through host memory and the communicator again. Kept, not owned.
  void sum_on_device(dist::DeviceAllReduce* sums);

  dist::Communicator& comm() const { return *comm_; }
  struct Stats {
    int64_t steps = 0;
    int64_t bytes = 0;              // gradient bytes all-reduced per step (each rank sends and receives ~2x this)
    int64_t started_in_backward = 0;  // buckets started before backward ended, over all steps
    int64_t buckets = 0;            // buckets per step
    double wait_seconds = 0;        // in finish(): starting the rest, waiting, copying back
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    int64_t floats = 0;
    std::vector<float> buffer;   // on the host (MPI's sums)
    Tensor on_device;            // or on the GPU (sum_on_device)
  };
  float* bucket_data(Bucket& b) { return device_sums_ ? b.on_device.f32() : b.buffer.data(); }
  void on_node();
  bool ready(const Bucket& b) const;
  void merge(size_t i);  // params_[i].grad = stash + grad
  void start(Bucket& b);

  std::vector<Var> params_;
  std::vector<Tensor> stash_;
  std::vector<long> baseline_;
  std::vector<Bucket> buckets_;
  dist::Communicator* comm_;
  dist::DeviceAllReduce* device_sums_ = nullptr;
  bool overlap_;
  bool armed_ = false;
  size_t next_ = 0;  // the next bucket to start
  std::function<void()> hook_;
  Stats stats_;
};

}  // namespace qkv::train
