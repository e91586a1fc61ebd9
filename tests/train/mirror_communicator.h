// A communicator of two ranks in one process, for tests of what a reduction does to its buffers:
// the "other rank" holds the same values, so a sum doubles every element (exactly, in float) and a
// max leaves it. GradientReducer's copies into its buckets and back (host or GPU gradients) can
// then be checked without MPI. Counts the floats it was given to sum.
#pragma once
#include <string>
#include <vector>

#include "qkv/dist/communicator.h"

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

  int64_t summed_floats = 0;
};

}  // namespace qkv::testing
