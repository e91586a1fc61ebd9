#include "qkv/core/cuda_runtime.h"

#include <array>
#include <iomanip>
#include <sstream>
#include <mutex>

#include "qkv/core/error.h"

#ifdef QKV_HAVE_CUDA
#include "qkv/core/cuda_check.h"
#endif

namespace qkv::cuda {

#ifdef QKV_HAVE_CUDA

namespace {
thread_local int current_index = -1;  // the device this thread made current last (-1: none yet)

// One stream per device, created on first use and never destroyed (tensors may outlive static
// teardown, and their buffers go back to a pool that queues on it).
cudaStream_t stream_of(int index) {
  static std::array<cudaStream_t, kMaxDevicesPerType> streams{};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!streams[static_cast<size_t>(index)]) {
    QKV_CUDA_CHECK(cudaSetDevice(index));
    QKV_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(index)], cudaStreamNonBlocking));
    // Kernels take short-lived scratch with cudaMallocAsync (attention's backward: B x H x Tq x Tk
    // floats a layer). The default pool returns freed memory to the driver at every
    // synchronisation, and a training step synchronises several times, so every step would map
    // that memory again: keep it (as the tensor pool keeps its buffers).
    cudaMemPool_t pool = nullptr;
    QKV_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
    uint64_t keep_all = UINT64_MAX;
    QKV_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  return streams[static_cast<size_t>(index)];
}
}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no GPU: not an error of anything later
      return 0;
    }
    return n;
  }();
  return count;
}

void check_available(Device device) {
  if (!device.is_cuda()) return;
  const int n = device_count();
  QKV_CHECK(n > 0, "device " << device.name() << ": no CUDA GPU is visible to this process (no driver, no GPU, "
                             "or CUDA_VISIBLE_DEVICES hides them)");
  QKV_CHECK(device.index >= 0 && device.index < n,
            "device " << device.name() << ": out of range, this machine has " << n << " CUDA GPU"
                      << (n == 1 ? "" : "s") << " (cuda:0" << (n > 1 ? " to cuda:" + std::to_string(n - 1) : "")
                      << ")");
}

void activate(Device device) {
  if (!device.is_cuda()) return;
  // Asked of the runtime, not remembered: other code on this thread (PyTorch's
  // torch.cuda.set_device in the same Python process) may have made another device current.
  int current = -1;
  if (current_index == device.index && cudaGetDevice(&current) == cudaSuccess && current == device.index) return;
  check_available(device);
  QKV_CUDA_CHECK(cudaSetDevice(device.index));
  current_index = device.index;
}

cudaStream_t current_stream() {
  if (current_index < 0) activate(Device::cuda(0));
  return stream_of(current_index);
}

std::string describe(Device device) {
  check_available(device);
  cudaDeviceProp prop{};
  QKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  std::ostringstream text;
  text << prop.name << ", sm_" << prop.major << prop.minor << ", " << std::fixed << std::setprecision(1)
       << static_cast<double>(prop.totalGlobalMem) / (1 << 30) << " GiB";
  return text.str();
}

std::string device_fault(Device device) {
  if (!device.is_cuda() || device.index < 0 || device.index >= device_count()) return {};
  // A sticky error is returned by every later call; the stream's query is cheap and waits for
  // nothing (busy is healthy). This thread's current device is asked back: activate() asks the runtime.
  int previous = -1;
  cudaError_t status = cudaGetDevice(&previous);
  if (status == cudaSuccess) status = cudaSetDevice(device.index);
  std::string fault;
  if (status == cudaSuccess) {
    try {
      status = cudaStreamQuery(stream_of(device.index));
    } catch (const std::exception& e) {  // the stream could not be made: that call's failure
      fault = e.what();
    }
  }
  if (previous >= 0 && previous != device.index) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();  // not this thread's next call's error
  if (fault.empty() && status != cudaSuccess && status != cudaErrorNotReady) fault = cudaGetErrorString(status);
  return fault.empty() ? fault : device.name() + ": " + fault;
}

void* malloc(Device device, size_t bytes) {
  activate(device);
  void* p = nullptr;
  // Out of memory is null; any other failure (a fault the GPU keeps) is no lack of room, and an
  // OutOfMemoryError would have the caller make room and try again for nothing.
  const auto failed = [&](cudaError_t status) {
    (void)cudaGetLastError();
    if (status != cudaErrorMemoryAllocation)
      throw_failure(status, "CUDA: cudaMalloc of " + std::to_string(bytes) + " bytes on " + device.name() + " failed: ");
  };
  const cudaError_t first = cudaMalloc(&p, bytes);
  if (first == cudaSuccess) return p;
  failed(first);
  // The kernels' scratch kept in the default pool (see stream_of) goes back first, then once more.
  cudaMemPool_t pool = nullptr;
  QKV_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  QKV_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device.index));
  QKV_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  const cudaError_t second = cudaMalloc(&p, bytes);
  if (second == cudaSuccess) return p;
  failed(second);
  return nullptr;  // still out of memory: the caller (the tensor pool) trims its own and retries
}

// Never throws: it runs in destructors (a tensor's storage, unpooled), where an exception would end
// the process, and cudaFree reports an earlier asynchronous fault that the next checked call reports
// anyway. Waits for the device: the pool frees only when trimming.
void free(Device device, void* p) {
  try {
    activate(device);
  } catch (const Error&) {
    return;  // a device that cannot be made current cannot have its memory freed either
  }
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

MemoryInfo memory_info(Device device) {
  activate(device);
  MemoryInfo info;
  QKV_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  // Between two GPUs each has its own stream: the source's queued work (what writes src) is
  // waited for first, and the copy itself before returning, since src may go back to its pool.
  const bool two_gpus = dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device;
  if (two_gpus) synchronize(src_device);
  const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
  activate(gpu);
  cudaStream_t stream = current_stream();
  QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  // Between two buffers of one device: queued like a kernel. With the host: host memory is
  // pageable (the CPU pool's), which an asynchronous copy may still be reading after the call
  // returns, so the copy waits, and the host may reuse or read its buffer at once.
  if (dst_device.is_cuda() && src_device.is_cuda() && !two_gpus) return;
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void synchronize(Device device) {
  if (!device.is_cuda()) return;
  activate(device);
  QKV_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void memset_zero(void* dst, size_t bytes) {
  if (bytes) QKV_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, current_stream()));
}

#else  // a build without CUDA: nothing can be placed on a GPU

namespace {
[[noreturn]] void not_built(const char* what) {
  throw Error(std::string(what) + ": this qkv was built without CUDA (configure with cmake -DQKV_CUDA=ON)");
}
}  // namespace

int device_count() { return 0; }
void check_available(Device device) {
  if (device.is_cuda()) not_built(("device " + device.name()).c_str());
}
void activate(Device device) { check_available(device); }
std::string describe(Device device) {
  check_available(device);
  return "cpu";
}
void* malloc(Device device, size_t) {
  check_available(device);
  return nullptr;
}
void free(Device, void*) {}
std::string device_fault(Device) { return {}; }
MemoryInfo memory_info(Device device) {
  check_available(device);
  return {};
}
void copy(void*, Device, const void*, Device, size_t) { not_built("a copy to or from a GPU"); }
void synchronize(Device) {}
void copy_strided(void*, const Dims&, const void*, const Dims&, const Dims&, int64_t) { not_built("a copy on a GPU"); }
void f32_to_bf16(void*, const float*, int64_t) { not_built("a conversion on a GPU"); }
void bf16_to_f32(float*, const void*, int64_t) { not_built("a conversion on a GPU"); }
void memset_zero(void*, size_t) { not_built("a fill on a GPU"); }

#endif

}  // namespace qkv::cuda
