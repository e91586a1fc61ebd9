#include "qkv/kernels/product_clock.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <tuple>

namespace qkv::kernels::product_clock {

bool same_shape(const Shape& x, const Shape& y) {
  return std::tie(x.M, x.N, x.K, x.trans_a, x.trans_b) == std::tie(y.M, y.N, y.K, y.trans_a, y.trans_b) &&
         std::strcmp(x.type, y.type) == 0;
}

namespace detail {
std::atomic<bool> enabled{false};
thread_local int depth = 0;

namespace {
std::atomic<int64_t> counted_ns{0};
std::atomic<bool> by_shape_enabled{false};
std::mutex shapes_lock;
std::vector<ShapeTotal> shapes;  // few distinct shapes a step (tens): a linear search
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add_since(int64_t start_ns, const Shape& shape) {
  const int64_t elapsed = (now_ns() - start_ns) / omp_get_num_threads();  // 1 outside a team
  counted_ns.fetch_add(elapsed, std::memory_order_relaxed);
  if (!by_shape_enabled.load(std::memory_order_relaxed)) return;
  const std::lock_guard<std::mutex> hold(shapes_lock);
  auto it = std::find_if(shapes.begin(), shapes.end(), [&](const ShapeTotal& t) { return same_shape(t.shape, shape); });
  if (it == shapes.end()) it = shapes.insert(shapes.end(), ShapeTotal{shape, 0, 0.0});
  ++it->calls;
  it->seconds += static_cast<double>(elapsed) * 1e-9;
}
}  // namespace detail

void set_enabled(bool on, bool by_shape) {
  detail::by_shape_enabled.store(on && by_shape, std::memory_order_relaxed);
  detail::enabled.store(on, std::memory_order_relaxed);
}

void reset() {
  detail::counted_ns.store(0, std::memory_order_relaxed);
  const std::lock_guard<std::mutex> hold(detail::shapes_lock);
  detail::shapes.clear();
}

double seconds() { return static_cast<double>(detail::counted_ns.load(std::memory_order_relaxed)) * 1e-9; }

std::vector<ShapeTotal> by_shape() {
  std::vector<ShapeTotal> totals;
  {
    const std::lock_guard<std::mutex> hold(detail::shapes_lock);
    totals = detail::shapes;
  }
  std::sort(totals.begin(), totals.end(), [](const ShapeTotal& x, const ShapeTotal& y) { return x.seconds > y.seconds; });
  return totals;
}

}  // namespace qkv::kernels::product_clock
