#include "qkv/core/buffer_pool.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>

#include "qkv/core/error.h"

namespace qkv {
namespace {

// Size classes: exact multiples of 64 bytes below 64 KiB; above, 8 steps per power of two, so at
// most 12.5% is wasted while distinct activation sizes still map to few classes.
size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 65536) return (bytes + 63) & ~size_t{63};
  size_t p = size_t{1} << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

struct PoolState {
  std::mutex mutex;
  std::unordered_map<size_t, Buffer*> free_lists;
  PoolStats stats;
};

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
    s.stats.system_allocs++;
    s.stats.bytes_live += static_cast<int64_t>(cls);
    if (s.stats.bytes_live > s.stats.bytes_peak) s.stats.bytes_peak = s.stats.bytes_live;
  }
  void* data = std::aligned_alloc(64, cls);
  QKV_CHECK(data != nullptr, "out of memory allocating " << cls << " bytes for a tensor");
  Buffer* b = new Buffer();
  b->bytes = cls;
  b->data = data;
  return b;
}

void BufferPool::release(Buffer* b) {
  PoolState& s = state();
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
  for (auto& [cls, head] : s.free_lists) {
    while (head) {
      Buffer* next = head->next_free;
      std::free(head->data);
      delete head;
      head = next;
    }
  }
  s.stats.bytes_cached = 0;
}

}  // namespace qkv
