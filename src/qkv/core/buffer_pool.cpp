#include "qkv/core/buffer_pool.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "qkv/core/cuda_runtime.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

// Size classes: multiples of 64 bytes up to 1 MiB; above, 16 classes per power of two (under
// 6.25% rounding). Coarse enough that nearly equal shapes (an encoder activation of length 100 and
// a decoder one of length 99) share a class, so a buffer freed by one is reused by the other
// instead of both sizes being cached side by side.
size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t{1} << 20)) return (bytes + 63) & ~size_t{63};
  const size_t step = (size_t{1} << (63 - __builtin_clzll(bytes))) / 16;
  return (bytes + step - 1) / step * step;
}

struct FreeList {
  Buffer* head = nullptr;
  uint64_t last_used = 0;  // the pool's clock when a buffer of this class was last asked for or freed
  int64_t live = 0;        // buffers of this class in use
  int64_t most_live = 0;   // the most in use at once (since the last trim)
};

struct PoolState {
  std::mutex mutex;
  std::unordered_map<size_t, FreeList> free_lists;
  PoolStats stats;
  uint64_t clock = 0;           // ticks once per acquire and release
  int64_t live_high_water = 0;  // most bytes ever live at once (since the last trim)
  int64_t needed = 0;           // the sum over classes of class bytes x most_live: what no step misses
  std::vector<int64_t> limits;  // of the ScopedCacheLimit objects alive
  int64_t memory_limit = 0;     // BufferPool::set_memory_limit's; 0: none
  int64_t pending = 0;          // bytes being taken from the system, not yet counted (under a limit)
};

// Idle bytes the default rule allows even when they take the pool past its high-water mark:
// small processes (tests, tiny models) keep their buffers.
constexpr int64_t kKeepCachedBytes = int64_t{64} << 20;

// Buffers of 1 MiB and more are mapped pages of their own, so releasing one gives its memory back
// to the OS at once (malloc would keep it in a fragmented heap).
constexpr size_t kMapThreshold = size_t{1} << 20;

// The device's allocator. The CPU's: aligned_alloc below kMapThreshold, mapped pages above. A
// GPU's: cudaMalloc (core/cuda_runtime.h). Null when out of memory.
void* system_alloc(Device device, size_t bytes) {
  if (device.is_cuda()) return cuda::malloc(device, bytes);
  if (bytes < kMapThreshold) return std::aligned_alloc(64, bytes);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void system_free(Device device, void* p, size_t bytes) {
  if (device.is_cuda())
    cuda::free(device, p);
  else if (bytes < kMapThreshold)
    std::free(p);
  else
    ::munmap(p, bytes);
}

void free_buffer(Buffer* b) {
  system_free(b->device, b->data, b->bytes);
  delete b;
}

// Frees every cached buffer (caller holds the lock); mapped buffers go straight back to the OS.
void release_cached(PoolState& s) {
  for (auto& [cls, list] : s.free_lists) {
    while (Buffer* b = list.head) {
      list.head = b->next_free;
      free_buffer(b);
    }
  }
  s.stats.bytes_cached = 0;
}

// Frees at least `bytes` of cached buffers, the classes used longest ago first (caller holds the
// lock). A training step's shapes follow its batch; the classes the last steps used are the ones
// the next step will most likely ask for again, so they go last.
void release_least_recent(PoolState& s, int64_t bytes) {
  std::vector<std::pair<uint64_t, size_t>> by_age;  // (last_used, class) of the non-empty lists
  for (auto it = s.free_lists.begin(); it != s.free_lists.end();) {
    if (it->second.head) {
      by_age.emplace_back(it->second.last_used, it->first);
      ++it;
    } else if (it->second.live == 0 && it->second.most_live == 0) {
      it = s.free_lists.erase(it);  // empty and never counted: nothing of it matters
    } else {
      ++it;
    }
  }
  std::sort(by_age.begin(), by_age.end());
  int64_t freed = 0;
  for (const auto& [age, cls] : by_age) {
    FreeList& list = s.free_lists[cls];
    while (Buffer* b = list.head) {
      if (freed >= bytes) break;
      list.head = b->next_free;
      freed += static_cast<int64_t>(b->bytes);
      s.stats.bytes_cached -= static_cast<int64_t>(b->bytes);
      free_buffer(b);
    }
    if (freed >= bytes) break;
  }
}

// One pool per device, indexed by type and ordinal.
PoolState& state(Device device) {
  QKV_CHECK(device.index >= 0 && device.index < kMaxDevicesPerType, "no pool for device " << device.name());
  // Never destroyed: tensors may outlive static teardown.
  static PoolState* pools = new PoolState[kDeviceTypes * kMaxDevicesPerType];
  return pools[static_cast<int>(device.type) * kMaxDevicesPerType + device.index];
}

// A buffer of class `cls` goes into use (caller holds the lock).
void count_live(PoolState& s, size_t cls) {
  s.stats.bytes_live += static_cast<int64_t>(cls);
  s.stats.bytes_peak = std::max(s.stats.bytes_peak, s.stats.bytes_live);
  s.live_high_water = std::max(s.live_high_water, s.stats.bytes_live);
  FreeList& list = s.free_lists[cls];
  if (++list.live > list.most_live) {
    list.most_live = list.live;
    s.needed += static_cast<int64_t>(cls);
  }
}

// The default rule's bound on live + idle bytes: the high-water mark of live bytes, or, up to an
// eighth more, what each class's own peak asks. A step's peak is one moment; its sizes peak at
// different moments (the forward's activations, the backward's gradients), so a pool held to the
// moment's total gave back, at each miss, the classes the step had used first, and missed them
// again the next step: a Bible bf16 training step of fixed shapes took 13 buffers (about 160 MB)
// from the system every step, 40,000 page faults, the pages cleared and unmapped again (2026-12-01).
int64_t idle_bound(const PoolState& s) {
  return std::max(s.live_high_water, std::min(s.needed, s.live_high_water + s.live_high_water / 8));
}

// A miss is about to take `bytes` from the system (caller holds the lock). With fixed shapes (a
// steady training step) this is never reached after the first step. With varying shapes (batches
// of different lengths) every new size misses, and the cache would grow without bound, so idle
// buffers are given back first:
// - By default, until live + idle + the new buffer fit in idle_bound (the high-water mark of live
//   bytes, or what each class's own peak asks), or idle is at most 64 MiB. The pool then holds at
//   most an eighth over its peak working set, and keeps the classes used last. Before, it freed every idle buffer once
//   they outweighed the live ones: a Bible training step of new shapes began by unmapping ~1 GB
//   and faulting it back in (page faults and munmap, ~4.5% of the step in perf).
// - Under a ScopedCacheLimit, until idle + the new buffer fit in the limit, the classes used longest
//   ago first: a search's batch that shrinks keeps its current step's buffers and gives back the
//   sizes of the rows that ended. (It used to free every idle buffer and trim glibc's heap at each
//   such miss: on John, 40% of translation's page faults came from re-faulting what that gave back.
//   The heap is now trimmed once, when the limit ends; see ~ScopedCacheLimit.)
void make_room(PoolState& s, int64_t bytes) {
  if (!s.limits.empty()) {
    const int64_t limit = *std::min_element(s.limits.begin(), s.limits.end());
    if (s.stats.bytes_cached + bytes > limit) release_least_recent(s, s.stats.bytes_cached + bytes - limit);
    return;
  }
  const int64_t idle_allowed = std::max(idle_bound(s) - s.stats.bytes_live - bytes, kKeepCachedBytes);
  if (s.stats.bytes_cached > idle_allowed) release_least_recent(s, s.stats.bytes_cached - idle_allowed);
}

// Takes the first idle buffer of `list` (which has one) and counts it live (caller holds the lock).
Buffer* pop_idle(PoolState& s, FreeList& list) {
  Buffer* b = list.head;
  list.head = b->next_free;
  b->next_free = nullptr;
  s.stats.bytes_cached -= static_cast<int64_t>(b->bytes);
  count_live(s, b->bytes);
  return b;
}

// A miss of a mapped size (1 MiB and more) under the default rule takes the smallest idle buffer of
// a class at most half again as large (caller holds the lock). A training step's shapes follow its
// batch (6000 tokens as 150 x 40 or 120 x 50), so its sizes move a little from step to step: each
// used to miss, the pool unmapped last step's buffers to stay under its peak, and the new ones
// were faulted in again. Bible training, 30 steps: 6.1M page faults with no margin, 4.2M with 1/4,
// 3.4M with 1/2, 2.7M with 2x (2026-11-24). Since idle_bound keeps each class's own peak, a
// larger class is idle more often, and a buffer taken at twice its size raises the live peak and
// what its class keeps: at 2x a GPT bf16 step's pool peaked at 0.81 GB, at 1.5x 0.74 GB, with no page
// fault a step either way; Bible training, 30 steps of varying shapes: 958,244 faults at 2x,
// 607,029 at 1.5x, the same peak RSS (1.14 GB) (2026-12-01). The bound on idle memory counts a
// buffer's whole class, so it holds as before. Not under a ScopedCacheLimit: decoding keeps little
// idle, and a buffer taken larger there raised generation's peak RSS (1.70 -> 2.00 GB with a 1/8 margin).
Buffer* take_larger(PoolState& s, size_t cls) {
  if (!s.limits.empty() || cls < kMapThreshold) return nullptr;
  const size_t most = cls + cls / 2;
  FreeList* best = nullptr;
  size_t best_cls = 0;
  for (auto& [c, list] : s.free_lists)
    if (list.head && c > cls && c <= most && (!best || c < best_cls)) {
      best = &list;
      best_cls = c;
    }
  if (!best) return nullptr;
  best->last_used = s.clock;
  return pop_idle(s, *best);
}

// The system's memory, or null. A GPU's memory is the pool's alone (no other process frees any):
// when it runs out, the idle buffers of its pool go back and the allocation is tried once more.
void* allocate_or_trim(Device device, size_t bytes) {
  void* data = system_alloc(device, bytes);
  if (!data && device.is_cuda()) {
    BufferPool::trim(device);
    data = system_alloc(device, bytes);
  }
  return data;
}

// The bytes the pool holds from the system, and those it is taking (caller holds the lock).
int64_t held(const PoolState& s) {
  return s.stats.bytes_live + s.stats.bytes_cached + s.stats.bytes_unpooled + s.pending;
}

// Under a memory limit, reserves `bytes` for a miss about to go to the system, once every idle
// buffer has gone back if need be; or throws the OutOfMemoryError naming the limit (caller holds
// the lock). Whether it reserved: the caller then takes the bytes off `pending` once the system has
// answered, with the memory or without.
bool reserve_under_limit(PoolState& s, Device device, int64_t bytes) {
  if (s.memory_limit <= 0) return false;
  if (held(s) + bytes > s.memory_limit) release_cached(s);
  if (held(s) + bytes > s.memory_limit) {
    constexpr double kMiB = 1 << 20;
    std::ostringstream message;
    message << "out of memory on " << device.name() << ": asked for " << bytes / kMiB << " MiB with "
            << std::max<int64_t>(0, s.memory_limit - held(s)) / kMiB << " MiB left of the " << s.memory_limit / kMiB
            << " MiB memory limit (--max-memory)";
    throw OutOfMemoryError(message.str());
  }
  s.pending += bytes;
  return true;
}

void check_allocated(const void* data, Device device, size_t bytes) {
  if (data) return;
  constexpr double kMiB = 1 << 20;
  std::ostringstream message;
  if (device.is_cuda()) {
    const cuda::MemoryInfo m = cuda::memory_info(device);
    message << "out of memory on " << device.name() << ": asked for " << bytes / kMiB << " MiB with "
            << m.free / kMiB << " MiB free of " << m.total / kMiB
            << " MiB (a smaller batch, or --max-batch-tokens, needs less)";
  } else {
    message << "out of memory allocating " << bytes / kMiB << " MiB for a tensor on " << device.name();
  }
  throw OutOfMemoryError(message.str());
}

}  // namespace

Buffer* BufferPool::acquire(size_t bytes, Device device) {
  const size_t cls = size_class(bytes);
  PoolState& s = state(device);
  bool reserved = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    FreeList& list = s.free_lists[cls];
    list.last_used = ++s.clock;
    if (list.head) return pop_idle(s, list);
    if (Buffer* b = take_larger(s, cls)) return b;
    make_room(s, static_cast<int64_t>(cls));  // may erase `list`
    reserved = reserve_under_limit(s, device, static_cast<int64_t>(cls));
  }
  void* data = allocate_or_trim(device, cls);
  {
    // Counted live once it exists: a request that fails (a caught out-of-memory error, say a
    // server's oversized request) must leave neither the live bytes nor the high-water mark that
    // bounds the idle buffers raised by its size.
    std::lock_guard<std::mutex> lock(s.mutex);
    if (reserved) s.pending -= static_cast<int64_t>(cls);
    if (data) {
      s.stats.system_allocs++;
      count_live(s, cls);
    }
  }
  check_allocated(data, device, cls);
  Buffer* b = new Buffer();
  b->bytes = cls;
  b->data = data;
  b->device = device;
  return b;
}

Buffer* BufferPool::acquire_unpooled(size_t bytes, Device device) {
  const size_t cls = size_class(bytes);
  PoolState& s = state(device);
  bool reserved = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    reserved = reserve_under_limit(s, device, static_cast<int64_t>(cls));
  }
  void* data = allocate_or_trim(device, cls);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (reserved) s.pending -= static_cast<int64_t>(cls);
    if (data) {
      s.stats.system_allocs++;
      s.stats.bytes_unpooled += static_cast<int64_t>(cls);
    }
  }
  check_allocated(data, device, cls);
  Buffer* b = new Buffer();
  b->bytes = cls;
  b->data = data;
  b->pooled = false;
  b->device = device;
  return b;
}

void BufferPool::release(Buffer* b) {
  PoolState& s = state(b->device);
  if (!b->pooled) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.stats.bytes_unpooled -= static_cast<int64_t>(b->bytes);
    }
    system_free(b->device, b->data, b->bytes);
    delete b;
    return;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  FreeList& list = s.free_lists[b->bytes];
  list.last_used = ++s.clock;
  --list.live;
  b->next_free = list.head;
  list.head = b;
  s.stats.bytes_live -= static_cast<int64_t>(b->bytes);
  s.stats.bytes_cached += static_cast<int64_t>(b->bytes);
}

void BufferPool::advise_huge_pages(Buffer* b) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (b->device.type != DeviceType::CPU || b->bytes < kHugePage) return;
  const auto begin = (reinterpret_cast<uintptr_t>(b->data) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = (reinterpret_cast<uintptr_t>(b->data) + b->bytes) & ~(kHugePage - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // failure changes nothing
}

PoolStats BufferPool::stats(Device device) {
  PoolState& s = state(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void BufferPool::reset_peak(Device device) {
  PoolState& s = state(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.bytes_peak = s.stats.bytes_live;
}

void BufferPool::set_memory_limit(int64_t bytes, Device device) {
  QKV_CHECK(bytes >= 0, "a memory limit must be >= 0 bytes (0: none), got " << bytes);
  PoolState& s = state(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.memory_limit = bytes;
}

int64_t BufferPool::memory_limit(Device device) {
  PoolState& s = state(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.memory_limit;
}

void BufferPool::trim(Device device) {
  PoolState& s = state(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  release_cached(s);
  // The bound starts afresh from what is live now.
  s.live_high_water = s.stats.bytes_live;
  s.needed = 0;
  for (auto it = s.free_lists.begin(); it != s.free_lists.end();) {
    it->second.most_live = it->second.live;
    s.needed += static_cast<int64_t>(it->first) * it->second.live;
    it = it->second.live == 0 ? s.free_lists.erase(it) : std::next(it);
  }
}

}  // namespace qkv

namespace qkv {

ScopedCacheLimit::ScopedCacheLimit(int64_t bytes) : bytes_(bytes) {
  PoolState& s = state(Device::cpu());
  std::lock_guard<std::mutex> lock(s.mutex);
  s.limits.push_back(bytes);
}

ScopedCacheLimit::~ScopedCacheLimit() {
  PoolState& s = state(Device::cpu());
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.limits.erase(std::find(s.limits.begin(), s.limits.end(), bytes_));
  }
  // The buffers under 1 MiB the limit gave back went to glibc's heap, where they stay, fragmented,
  // unless trimmed (translation's peak RSS 205 -> 185 MB on John). Once per limit, not per release:
  // trimming at every release re-faulted them step after step.
  malloc_trim(0);
}

}  // namespace qkv
