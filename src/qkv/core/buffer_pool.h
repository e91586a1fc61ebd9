// BufferPool: a caching allocator for tensor storage.
//
// Tensors of a training step have the same sizes every step, so freed buffers are kept on a free
// list keyed by their (rounded) byte size and handed out again. After the first step a steady-state
// step asks the system for no memory at all; `stats().system_allocs` counts the misses so a test
// can prove it. When shapes vary (batches of different lengths), a miss first returns idle buffers
// to the system, the sizes used longest ago first, until live + idle fit under what each size's own
// peak asked (at most an eighth over the most bytes ever live at once, never under it), or idle is
// at most 64 MiB: memory stays near the peak working set, and the sizes the last steps used stay
// cached.
// Buffers are 64-byte aligned (one cache line, a full AVX-512 vector).
//
// One pool per device: each has its own free lists, statistics and system allocator (the host's
// aligned_alloc / mmap for the CPU; a CUDA backend adds cudaMalloc's). A buffer goes back to the
// pool of the device it came from. Every function takes the device, the CPU by default.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "qkv/core/device.h"

namespace qkv {

struct Buffer {
  std::atomic<int64_t> refs{0};
  size_t bytes = 0;     // capacity (rounded size class)
  void* data = nullptr;
  Buffer* next_free = nullptr;
  bool pooled = true;  // false: returned to the system when released, never cached
  Device device;       // whose pool it returns to
};

struct PoolStats {
  int64_t system_allocs = 0;  // buffers obtained from the system (pool misses)
  int64_t bytes_live = 0;     // bytes held by live tensors
  int64_t bytes_peak = 0;     // high-water mark of bytes_live since the last reset_peak()
  int64_t bytes_cached = 0;   // bytes parked on free lists
  int64_t bytes_unpooled = 0; // bytes of live acquire_unpooled buffers (not in bytes_live: mostly unwritten)
};

class BufferPool {
 public:
  static Buffer* acquire(size_t bytes, Device device = Device::cpu());
  // A buffer of its own, never cached: from 1 MiB up fresh mapped pages, which take memory only
  // once written, and which release() unmaps at once. Counted in bytes_unpooled, not in bytes_live.
  static Buffer* acquire_unpooled(size_t bytes, Device device = Device::cpu());
  static void release(Buffer* buffer);
  // Asks the OS to back the buffer's whole 2 MiB pages with huge pages (advice only): for long-lived
  // buffers read over and over, such as packed weights, whose TLB misses it saves. CPU only.
  static void advise_huge_pages(Buffer* buffer);
  static PoolStats stats(Device device = Device::cpu());
  static void reset_peak(Device device = Device::cpu());
  // Returns every cached buffer to the system (e.g. between phases with different shapes), and
  // restarts the high-water mark the default rule bounds the pool by from the bytes live now.
  static void trim(Device device = Device::cpu());
  // The most bytes the device's pool may hold from the system at once (live, idle and unpooled
  // buffers; a model's weights included); 0, the default, for no limit but the device's own. A miss
  // that would pass it first gives back every idle buffer, then throws an OutOfMemoryError naming
  // the size asked, what is left and the limit: what `qkv serve --max-memory` sets, so that one
  // server leaves the rest of a machine (or a shared GPU) to others, and answers 503 rather than
  // being killed. Buffers held already are not taken back when the limit is set below them.
  static void set_memory_limit(int64_t bytes, Device device = Device::cpu());
  static int64_t memory_limit(Device device = Device::cpu());
};

// What the decoding loops (beam and greedy search, generation) keep idle: about one step's
// buffers for the Bible model at 128 rows (translation's peak RSS 267 -> 225 MB, no slower; with
// glibc's heap trimmed, 194 MB, now 185 with the key/value storage kept across batches).
constexpr int64_t kStepBuffersKept = int64_t{16} << 20;

// kStepBuffersKept and one step's logits (rows x vocab floats, with the 1/16 its size class may
// round up): a large vocabulary's logits are the step's largest buffer, and must not come fresh
// from the system at every step. OPUS-MT's 58,101 pieces at 128 rows make 30 MB a step; under
// 16 MiB they were mapped and faulted in again each step (page faults ~8% of the translation time).
// Keeping the buffer idle between steps costs no peak memory: it is live during every step.
inline int64_t step_buffers_kept(int64_t rows, int64_t vocab) {
  return kStepBuffersKept + rows * vocab * static_cast<int64_t>(sizeof(float)) / 16 * 17;
}

// While one lives, the pool keeps at most `bytes` of idle buffers instead of following its default
// rule (idle up to the high-water mark of live bytes, and 64 MiB). For inference whose shapes
// shrink step by step: a beam search's batch loses a sentence's rows every few steps, each step's
// buffers then never fit again, and under the rule of the time (as much idle as live, which
// includes the model's weights) translation kept up to 67 MB of them idle. A miss under a limit
// gives back the classes used longest ago until idle + the new buffer fit; the end of a limit trims
// glibc's heap (malloc_trim). The limit is the CPU pool's, one per process: while any limit lives,
// the smallest one holds for every thread.
class ScopedCacheLimit {
 public:
  explicit ScopedCacheLimit(int64_t bytes);
  ~ScopedCacheLimit();
  ScopedCacheLimit(const ScopedCacheLimit&) = delete;
  ScopedCacheLimit& operator=(const ScopedCacheLimit&) = delete;

 private:
  int64_t bytes_;
};

}  // namespace qkv
