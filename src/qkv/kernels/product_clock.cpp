#include "qkv/kernels/product_clock.h"

#include <omp.h>

#include <chrono>

namespace qkv::kernels::product_clock {

namespace detail {
std::atomic<bool> enabled{false};
thread_local int depth = 0;

namespace {
std::atomic<int64_t> counted_ns{0};
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add_since(int64_t start_ns) {
  const int64_t elapsed = now_ns() - start_ns;
  counted_ns.fetch_add(elapsed / omp_get_num_threads(), std::memory_order_relaxed);  // 1 outside a team
}
}  // namespace detail

void set_enabled(bool on) { detail::enabled.store(on, std::memory_order_relaxed); }

void reset() { detail::counted_ns.store(0, std::memory_order_relaxed); }

double seconds() { return static_cast<double>(detail::counted_ns.load(std::memory_order_relaxed)) * 1e-9; }

}  // namespace qkv::kernels::product_clock
