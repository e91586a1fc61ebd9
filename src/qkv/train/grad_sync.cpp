#include "qkv/train/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "qkv/core/cuda_runtime.h"
#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

namespace qkv::train {
namespace {

// n floats between a gradient (host or GPU) and a bucket. A bucket on the host (MPI's sums): a GPU's
// gradients are copied out once their backward is queued (the copy waits for the device's stream)
// and the sums copied back before the optimizer step. A bucket on the GPU: both copies are queued.
void copy_floats(float* dst, Device dst_device, const float* src, Device src_device, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!dst_device.is_cuda() && !src_device.is_cuda()) {
    std::memcpy(dst, src, bytes);
  } else {
    cuda::copy(dst, dst_device, src, src_device, bytes);
  }
}

}  // namespace

GradientReducer::GradientReducer(std::vector<Var> params, dist::Communicator& comm, int64_t bucket_bytes, bool overlap)
    : params_(std::move(params)), comm_(&comm), overlap_(overlap) {
  stash_.resize(params_.size());
  baseline_.assign(params_.size(), 0);
  hook_ = [this] { on_node(); };
  if (comm_->size() == 1) return;
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  Bucket current;
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].value().numel();
    if (!current.params.empty() && filled + n > cap) {
      current.buffer.resize(static_cast<size_t>(filled));
      buckets_.push_back(std::move(current));
      current = Bucket();
      filled = 0;
    }
    current.params.push_back(k);
    filled += n;
  }
  if (!current.params.empty()) {
    current.buffer.resize(static_cast<size_t>(filled));
    buckets_.push_back(std::move(current));
  }
  stats_.buckets = static_cast<int64_t>(buckets_.size());
  for (Bucket& b : buckets_) {
    b.floats = static_cast<int64_t>(b.buffer.size());
    stats_.bytes += b.floats * static_cast<int64_t>(sizeof(float));
  }
}

void GradientReducer::sum_on_device(dist::DeviceAllReduce* sums) {
  QKV_CHECK(!armed_, "all-reduce: the buckets change place between steps only");
  device_sums_ = sums;
  for (Bucket& b : buckets_) {
    if (!sums) {
      b.on_device = Tensor();
      b.buffer.resize(static_cast<size_t>(b.floats));
      continue;
    }
    for (size_t i : b.params)
      QKV_CHECK(params_[i].value().device() == sums->device(),
                "all-reduce on " << sums->device().name() << ": parameter " << i << " is on "
                                 << params_[i].value().device().name());
    b.on_device = Tensor::empty(Dims{b.floats}, DType::F32, sums->device());
    b.buffer = std::vector<float>();
  }
}

void GradientReducer::stash() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* g = params_[i].grad_slot();
    if (!g || !g->defined()) continue;
    if (stash_[i].defined()) {
      ops::add_inplace(stash_[i], *g);
    } else {
      stash_[i] = *g;
    }
    *g = Tensor();
  }
}

void GradientReducer::merge(size_t i) {
  if (!stash_[i].defined()) return;
  Tensor* g = params_[i].grad_slot();
  if (g->defined()) ops::add_inplace(stash_[i], *g);
  *g = stash_[i];
  stash_[i] = Tensor();
}

void GradientReducer::arm() {
  next_ = 0;
  armed_ = true;
  for (size_t i = 0; i < params_.size(); ++i) baseline_[i] = params_[i].cell().use_count();
}

bool GradientReducer::ready(const Bucket& b) const {
  for (size_t i : b.params)
    if (params_[i].cell().use_count() > baseline_[i]) return false;
  return true;
}

void GradientReducer::start(Bucket& b) {
  const Device where = device_sums_ ? device_sums_->device() : Device::cpu();
  if (device_sums_) cuda::activate(where);
  float* out = bucket_data(b);
  for (size_t i : b.params) {
    merge(i);
    const Tensor& g = params_[i].grad();
    const int64_t n = params_[i].value().numel();
    if (g.defined()) {
      QKV_CHECK(g.is_contiguous(), "all-reduce: the gradient of parameter " << i << " is not contiguous");
      copy_floats(out, where, g.f32(), g.device(), n);
    } else if (device_sums_) {
      cuda::memset_zero(out, static_cast<size_t>(n) * sizeof(float));
    } else {
      std::fill(out, out + n, 0.f);
    }
    out += n;
  }
  if (device_sums_) {
    device_sums_->allreduce_sum(bucket_data(b), b.floats);
  } else {
    comm_->start_allreduce_sum(bucket_data(b), b.floats);
  }
}

void GradientReducer::on_node() {
  if (!armed_) return;
  while (next_ < buckets_.size() && ready(buckets_[next_])) {
    start(buckets_[next_++]);
    ++stats_.started_in_backward;
  }
  comm_->progress();
}

int64_t GradientReducer::finish(int64_t value) {
  armed_ = false;
  ++stats_.steps;
  if (comm_->size() == 1) {
    for (size_t i = 0; i < params_.size(); ++i) merge(i);
    return value;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (; next_ < buckets_.size(); ++next_) start(buckets_[next_]);
  next_ = 0;
  // Which parameters have a gradient on some rank, and the max of `value`.
  std::vector<int64_t> flags(params_.size() + 1);
  for (size_t i = 0; i < params_.size(); ++i) flags[i] = params_[i].grad().defined() ? 1 : 0;
  flags.back() = value;
  if (!device_sums_) comm_->wait_all();  // NCCL's sums are queued on the GPU: nothing to wait for here
  comm_->allreduce_max(flags.data(), static_cast<int64_t>(flags.size()));
  const Device where = device_sums_ ? device_sums_->device() : Device::cpu();
  for (Bucket& b : buckets_) {
    const float* in = bucket_data(b);
    for (size_t i : b.params) {
      const int64_t n = params_[i].value().numel();
      if (flags[i]) {
        Tensor* g = params_[i].grad_slot();
        const Device device = params_[i].value().device();
        if (!g->defined()) *g = Tensor::empty(params_[i].shape(), DType::F32, device);
        copy_floats(g->f32(), g->device(), in, where, n);
      }
      in += n;
    }
  }
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flags.back();
}

}  // namespace qkv::train
