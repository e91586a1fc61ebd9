// Time spent inside the matrix products, for the benchmarks' "matrix products' share of the step"
// (issue 34: on a CPU with matrix units, how much of a step is left to them). Counted at the
// products' entry points: gemm_blocked, gemm_bf16 (and its packed form), gemm_packed, gemm_int8,
// attention's in-place head tile, and kernels::sgemm's OpenBLAS calls. A product called inside
// another (gemm_bf16's widened build calls gemm_blocked) counts once, as the outer one's.
//
// Off by default; then a product pays one relaxed atomic load. The count estimates wall time: a
// product called outside any OpenMP parallel region adds its duration, one called by a thread of a
// team of T (attention's heads, T at a time) adds 1/T of it.
//
// By shape (set_enabled(true, true)), it also keeps each distinct product's calls, time and
// multiply-adds, so that a benchmark can say which products of a step run below the rate the same
// shape reaches alone (bench_gemm): operands cold in the caches, short heads, a split between threads.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

namespace qkv::kernels::product_clock {

// A product's form: operand type (its entry point) and shape, C (M, N) = op(A) (M, K) op(B) (K, N).
struct Shape {
  const char* type = "";  // "f32", "bf16", "int8" (a string literal)
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
};

namespace detail {
extern std::atomic<bool> enabled;
int64_t now_ns();
void add_since(int64_t start_ns, const Shape& shape);  // ends an outermost scope
extern thread_local int depth;
}  // namespace detail

// by_shape: keep each shape's totals too (behind a lock: for benchmarks, which print them).
void set_enabled(bool on, bool by_shape = false);
void reset();
// Seconds counted since reset().
double seconds();

struct ShapeTotal {
  Shape shape;
  int64_t calls = 0;
  double seconds = 0;  // counted as seconds() counts: 1/T of a product made by one of T threads
  double flops() const { return 2.0 * static_cast<double>(shape.M) * shape.N * shape.K * calls; }
};
// Each shape's totals since reset(), the most time first (empty unless enabled by shape).
std::vector<ShapeTotal> by_shape();
// Adds calls and seconds to `shape`'s entry of `totals` (a new entry if it has none): how the clock
// keeps its totals, and how a benchmark sums them over its steps.
void add_to(std::vector<ShapeTotal>& totals, const Shape& shape, int64_t calls, double seconds);

// Counts the products' time from construction to destruction, when the clock is enabled.
class Scope {
 public:
  Scope(const char* type, int64_t M, int64_t N, int64_t K, bool trans_a = false, bool trans_b = false) {
    if (!detail::enabled.load(std::memory_order_relaxed)) return;
    if (detail::depth++ == 0) {
      start_ns_ = detail::now_ns();
      shape_ = Shape{type, M, N, K, trans_a, trans_b};
    }
    counting_ = true;
  }
  ~Scope() {
    if (!counting_) return;
    if (--detail::depth == 0) detail::add_since(start_ns_, shape_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int64_t start_ns_ = 0;
  Shape shape_;
  bool counting_ = false;
};

}  // namespace qkv::kernels::product_clock
