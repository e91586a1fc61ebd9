#include "qkv/core/buffer_pool.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>
#include <unordered_map>

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

struct PoolState {
  std::mutex mutex;
  std::unordered_map<size_t, Buffer*> free_lists;
  PoolStats stats;
  std::vector<int64_t> limits;  // of the ScopedCacheLimit objects alive
};

constexpr int64_t kKeepCachedBytes = int64_t{64} << 20;

// Buffers of 1 MiB and more are mapped pages of their own, so releasing one gives its memory back
// to the OS at once (malloc would keep it in a fragmented heap).
constexpr size_t kMapThreshold = size_t{1} << 20;

void* system_alloc(size_t bytes) {
  if (bytes < kMapThreshold) return std::aligned_alloc(64, bytes);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void system_free(void* p, size_t bytes) {
  if (bytes < kMapThreshold)
    std::free(p);
  else
    ::munmap(p, bytes);
}

// Frees every cached buffer (caller holds the lock); mapped buffers go straight back to the OS.
void release_cached(PoolState& s) {
  for (auto& [cls, head] : s.free_lists) {
    while (head) {
      Buffer* next = head->next_free;
      system_free(head->data, head->bytes);
      delete head;
      head = next;
    }
  }
  s.stats.bytes_cached = 0;
}

PoolState& state() {
  static PoolState* s = new PoolState();  // never destroyed: tensors may outlive static teardown
  return *s;
}

}  // namespace

Buffer* BufferPool::acquire(size_t bytes) {
  const size_t cls = size_class(bytes);
  PoolState& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.free_lists.find(cls);
    if (it != s.free_lists.end() && it->second) {
      Buffer* b = it->second;
      it->second = b->next_free;
      b->next_free = nullptr;
      s.stats.bytes_cached -= static_cast<int64_t>(cls);
      s.stats.bytes_live += static_cast<int64_t>(cls);
      if (s.stats.bytes_live > s.stats.bytes_peak) s.stats.bytes_peak = s.stats.bytes_live;
      return b;
    }
    // A miss. With fixed shapes (a steady training step) this line is never reached after the
    // first step. With varying shapes (batches of different lengths) every new size misses, and the
    // cache would grow without bound: once idle buffers outweigh the live ones (and 64 MiB), they
    // are given back before allocating. 64 MiB: a training step's live tensors dwarf it, and
    // inference, whose shapes change every step, keeps its memory near the working set.
    // A ScopedCacheLimit replaces the rule while it lives.
    const bool limited = !s.limits.empty();
    const int64_t keep = limited ? *std::min_element(s.limits.begin(), s.limits.end())
                                 : std::max<int64_t>(s.stats.bytes_live, kKeepCachedBytes);
    if (s.stats.bytes_cached > keep) {
      release_cached(s);
      // Under a limit, also hand the heap's free pages back: the small buffers freed here would
      // otherwise stay in glibc's heap, fragmented (translation: peak RSS 225 -> 194 MB, about
      // 2.5% slower).
      if (limited) malloc_trim(0);
    }
    s.stats.system_allocs++;
    s.stats.bytes_live += static_cast<int64_t>(cls);
    if (s.stats.bytes_live > s.stats.bytes_peak) s.stats.bytes_peak = s.stats.bytes_live;
  }
  void* data = system_alloc(cls);
  QKV_CHECK(data != nullptr, "out of memory allocating " << cls << " bytes for a tensor");
  Buffer* b = new Buffer();
  b->bytes = cls;
  b->data = data;
  return b;
}

Buffer* BufferPool::acquire_unpooled(size_t bytes) {
  const size_t cls = size_class(bytes);
  void* data = system_alloc(cls);
  QKV_CHECK(data != nullptr, "out of memory allocating " << cls << " bytes for a tensor");
  {
    PoolState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stats.system_allocs++;
    s.stats.bytes_unpooled += static_cast<int64_t>(cls);
  }
  Buffer* b = new Buffer();
  b->bytes = cls;
  b->data = data;
  b->pooled = false;
  return b;
}

void BufferPool::release(Buffer* b) {
  PoolState& s = state();
  if (!b->pooled) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.stats.bytes_unpooled -= static_cast<int64_t>(b->bytes);
    }
    system_free(b->data, b->bytes);
    delete b;
    return;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  Buffer*& head = s.free_lists[b->bytes];
  b->next_free = head;
  head = b;
  s.stats.bytes_live -= static_cast<int64_t>(b->bytes);
  s.stats.bytes_cached += static_cast<int64_t>(b->bytes);
}

PoolStats BufferPool::stats() {
  PoolState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void BufferPool::reset_peak() {
  PoolState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.bytes_peak = s.stats.bytes_live;
}

void BufferPool::trim() {
  PoolState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  release_cached(s);
}

}  // namespace qkv

namespace qkv {

ScopedCacheLimit::ScopedCacheLimit(int64_t bytes) : bytes_(bytes) {
  PoolState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.limits.push_back(bytes);
}

ScopedCacheLimit::~ScopedCacheLimit() {
  PoolState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.limits.erase(std::find(s.limits.begin(), s.limits.end(), bytes_));
}

}  // namespace qkv
