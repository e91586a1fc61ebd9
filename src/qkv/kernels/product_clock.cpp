#include "qkv/kernels/product_clock.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <tuple>

namespace qkv::kernels::product_clock {

void add_to(std::vector<ShapeTotal>& totals, const Shape& shape, int64_t calls, double seconds) {
  const auto same = [&](const ShapeTotal& t) {
    const Shape& x = t.shape;
    return std::tie(x.M, x.N, x.K, x.trans_a, x.trans_b) ==
               std::tie(shape.M, shape.N, shape.K, shape.trans_a, shape.trans_b) &&
           std::strcmp(x.type, shape.type) == 0;
  };
  auto it = std::find_if(totals.begin(), totals.end(), same);  // tens of shapes a step: a linear search
  if (it == totals.end()) it = totals.insert(totals.end(), ShapeTotal{shape, 0, 0.0});
  it->calls += calls;
  it->seconds += seconds;
}

namespace detail {
std::atomic<bool> enabled{false};
thread_local int depth = 0;

namespace {
std::atomic<int64_t> counted_ns{0};
std::atomic<bool> by_shape_enabled{false};
std::mutex shapes_lock;
std::vector<ShapeTotal> shapes;
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
  add_to(shapes, shape, 1, static_cast<double>(elapsed) * 1e-9);
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
