// Time spent inside the matrix products, for the benchmarks' "matrix products' share of the step"
// (issue 34: on a CPU with matrix units, how much of a step is left to them). Counted at the
// products' entry points: gemm_blocked, gemm_bf16 (and its packed form), gemm_packed, gemm_int8,
// and kernels::sgemm's OpenBLAS calls. A product called inside another (gemm_bf16's widened build
// calls gemm_blocked) counts once.
//
// Off by default; then a product pays one relaxed atomic load. The count estimates wall time: a
// product called outside any OpenMP parallel region adds its duration, one called by a thread of a
// team of T (attention's heads, T at a time) adds 1/T of it.
#pragma once
#include <atomic>
#include <cstdint>

namespace qkv::kernels::product_clock {

namespace detail {
extern std::atomic<bool> enabled;
int64_t now_ns();
void add_since(int64_t start_ns);  // ends an outermost scope
extern thread_local int depth;
}  // namespace detail

void set_enabled(bool on);
void reset();
// Seconds counted since reset().
double seconds();

// Counts the products' time from construction to destruction, when the clock is enabled.
class Scope {
 public:
  Scope() {
    if (!detail::enabled.load(std::memory_order_relaxed)) return;
    if (detail::depth++ == 0) start_ns_ = detail::now_ns();
    counting_ = true;
  }
  ~Scope() {
    if (!counting_) return;
    if (--detail::depth == 0) detail::add_since(start_ns_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int64_t start_ns_ = 0;
  bool counting_ = false;
};

}  // namespace qkv::kernels::product_clock
