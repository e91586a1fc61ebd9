// Sums over the ranks of buffers that stay on the GPUs (issue 38: "gradients all-reduced with
// NCCL"). GradientReducer keeps its buckets on the GPU when it is given a DeviceAllReduce, and each
// bucket's sum is queued on the device's stream like a kernel: no copy to the host and back, and no
// wait until the optimizer reads the sums.
//
// NcclGroup is NCCL's: loaded at run time (libnccl.so.2, from the CUDA toolkit or PyTorch's
// nvidia-nccl wheel), so a CUDA build runs without NCCL until it is asked for. The ranks meet once
// through the MPI communicator, to share NCCL's id; every rank must then call allreduce_sum for the
// same buffers in the same order (NCCL's rule, as MPI's for collectives; GradientReducer starts its
// buckets in index order on every rank). NCCL needs a GPU per rank: two ranks on one GPU are
// refused by name before NCCL is called (train::check_gpu_per_rank).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "qkv/core/device.h"
#include "qkv/dist/communicator.h"

namespace qkv::dist {

class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  virtual Device device() const = 0;
  // In place: the sum over the ranks of n floats on device(), queued on its stream after the work
  // already queued there; what is queued after it sees the sums.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  // "NCCL 2.27.3, 2 ranks"
  virtual std::string describe() const = 0;
};

class NcclGroup final : public DeviceAllReduce {
 public:
  // Collective over `comm`: every rank calls it with its own GPU. Throws a qkv::Error where NCCL
  // cannot run (no CUDA build, no libnccl.so.2, no GPU) or a call fails, naming the call.
  NcclGroup(Communicator& comm, Device device);
  ~NcclGroup() override;
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  Device device() const override { return device_; }
  void allreduce_sum(float* data, int64_t n) override;
  std::string describe() const override;

 private:
  struct Comm;
  std::unique_ptr<Comm> comm_;
  Device device_;
  int ranks_ = 1;
};

// Why NcclGroup cannot run in this process ("" where it can load NCCL): no CUDA build, or
// libnccl.so.2 not found (the loader's message, and where to look).
std::string nccl_unavailable();

}  // namespace qkv::dist
