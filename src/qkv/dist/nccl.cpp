#include "qkv/dist/nccl.h"

#include <exception>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "qkv/core/cuda_runtime.h"
#include "qkv/core/error.h"

#if defined(QKV_HAVE_CUDA) && __has_include(<nccl.h>)
#define QKV_HAVE_NCCL_HEADER 1
#include <dlfcn.h>
#include <nccl.h>

#include "qkv/core/cuda_check.h"
#endif

namespace qkv::dist {

#ifdef QKV_HAVE_NCCL_HEADER
namespace {

// The NCCL entry points qkv calls, from libnccl.so.2 opened once.
struct NcclLibrary {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string error;  // why it could not be loaded ("" when it was)
};

const NcclLibrary& nccl_library() {
  static const NcclLibrary lib = [] {
    NcclLibrary l;
    void* handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!handle) handle = ::dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      l.error = std::string("cannot load libnccl.so.2 (") + (why ? why : "not found") +
                "); it comes with the CUDA toolkit (lib64/) or PyTorch's nvidia-nccl wheel (nvidia/nccl/lib/): put "
                "its directory on LD_LIBRARY_PATH";
      return l;
    }
    const auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
      if (!fn && l.error.empty()) l.error = std::string("libnccl.so.2 lacks ") + name;
    };
    load(l.get_version, "ncclGetVersion");
    load(l.get_unique_id, "ncclGetUniqueId");
    load(l.comm_init_rank, "ncclCommInitRank");
    load(l.all_reduce, "ncclAllReduce");
    load(l.comm_destroy, "ncclCommDestroy");
    load(l.error_string, "ncclGetErrorString");
    return l;
  }();
  return lib;
}

const NcclLibrary& loaded_nccl() {
  const NcclLibrary& lib = nccl_library();
  QKV_CHECK(lib.error.empty(), "NCCL: " << lib.error);
  return lib;
}

}  // namespace

// QKV_NCCL_CHECK(lib, "ncclAllReduce", lib.all_reduce(...)): throws "NCCL: ncclAllReduce failed:
// <NCCL's reason>".
#define QKV_NCCL_CHECK(lib, name, call)                                                   \
  do {                                                                                    \
    const ncclResult_t qkv_nccl_status_ = (call);                                         \
    QKV_CHECK(qkv_nccl_status_ == ncclSuccess,                                            \
              "NCCL: " << name << " failed: " << (lib).error_string(qkv_nccl_status_)); \
  } while (0)

struct NcclGroup::Comm {
  ncclComm_t handle = nullptr;
  int version = 0;
};

namespace {
// Runs `setup` on this rank and tells every rank whether all succeeded, so that no rank waits in a
// collective (the id's broadcast, NCCL's init) for one that threw: this rank's own error is thrown
// again, and the other ranks' failure is named.
template <class Setup>
void on_every_rank_or_none(Communicator& comm, const char* what, Setup setup) {
  std::exception_ptr failure;
  try {
    setup();
  } catch (const Error&) {
    failure = std::current_exception();
  }
  int64_t failed = failure ? 1 : 0;
  comm.allreduce_max(&failed, 1);
  if (failure) std::rethrow_exception(failure);
  QKV_CHECK(failed == 0, "NCCL: another rank failed " << what << " (its error names why)");
}
}  // namespace

NcclGroup::NcclGroup(Communicator& comm, Device device) : comm_(std::make_unique<Comm>()), device_(device) {
  on_every_rank_or_none(comm, "to set up its GPU or load libnccl.so.2", [&] {
    QKV_CHECK(device.is_cuda(), "NCCL sums gradients on GPUs, not on " << device.name());
    cuda::check_available(device);
    const NcclLibrary& lib = loaded_nccl();
    QKV_NCCL_CHECK(lib, "ncclGetVersion", lib.get_version(&comm_->version));
  });
  const NcclLibrary& lib = nccl_library();
  // Rank 0 makes the id; a failure there is every rank's (the flag travels with the id).
  struct {
    ncclUniqueId id;
    int32_t failed;
  } offer{};
  std::string why;
  if (comm.rank() == 0) {
    const ncclResult_t made = lib.get_unique_id(&offer.id);
    offer.failed = made == ncclSuccess ? 0 : 1;
    if (offer.failed) why = lib.error_string(made);
  }
  comm.broadcast(&offer, static_cast<int64_t>(sizeof offer), 0);
  QKV_CHECK(!offer.failed, "NCCL: ncclGetUniqueId failed" << (comm.rank() == 0 ? ": " + why : " on rank 0"));
  cuda::activate(device);
  ranks_ = comm.size();
  QKV_NCCL_CHECK(lib, "ncclCommInitRank", lib.comm_init_rank(&comm_->handle, ranks_, offer.id, comm.rank()));
}

NcclGroup::~NcclGroup() {
  if (!comm_ || !comm_->handle) return;
  try {
    cuda::synchronize(device_);  // no sum of this communicator still queued
  } catch (const Error&) {  // a failed device: the communicator goes all the same
  }
  nccl_library().comm_destroy(comm_->handle);
}

void NcclGroup::allreduce_sum(float* data, int64_t n) {
  if (n <= 0) return;
  const NcclLibrary& lib = loaded_nccl();
  cuda::activate(device_);
  QKV_NCCL_CHECK(lib, "ncclAllReduce",
                 lib.all_reduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_->handle,
                                cuda::current_stream()));
}

std::string NcclGroup::describe() const {
  std::ostringstream text;
  const int v = comm_->version;  // 2.19.3 is 21903
  text << "NCCL " << v / 10000 << "." << v / 100 % 100 << "." << v % 100 << ", " << ranks_ << " rank"
       << (ranks_ == 1 ? "" : "s") << " (this one on " << device_.name() << ")";
  return text.str();
}

std::string nccl_unavailable() { return nccl_library().error; }

#else  // no CUDA build, or no nccl.h to build against

struct NcclGroup::Comm {};

namespace {
std::string why_no_nccl() {
  return cuda::kBuilt ? "this qkv was built without nccl.h (the CUDA toolkit's include/)"
                      : "this qkv was built without CUDA (-DQKV_CUDA=ON)";
}
}  // namespace

NcclGroup::NcclGroup(Communicator&, Device device) : device_(device) {
  QKV_CHECK(false, "NCCL: " << why_no_nccl());
}
NcclGroup::~NcclGroup() = default;
void NcclGroup::allreduce_sum(float*, int64_t) { QKV_CHECK(false, "NCCL: " << why_no_nccl()); }
std::string NcclGroup::describe() const { return "NCCL (not built)"; }
std::string nccl_unavailable() { return why_no_nccl(); }

#endif

}  // namespace qkv::dist
