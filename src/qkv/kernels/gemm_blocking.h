// What the blocked GEMMs share (gemm_blocked in blocked_gemm.cpp, gemm_bf16's avx512_bf16 build):
// the product's operands and how threads split it.
//
// Included by translation units built for different instruction sets, so the functions have
// internal linkage (an unnamed namespace): each unit keeps its own copy, and the linker can never
// hand an AVX2-only caller the copy compiled with AVX-512.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>

#include "qkv/kernels/weight_alloc.h"

namespace qkv::kernels::blocking {

// C = alpha * op(A) @ op(B) + beta * C + bias, row-major, ld* row strides (blocked_gemm.h).
struct Product {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
  const float* bias;  // N floats added to every row, or null
  // gemm_bf16's B given as bf16 bits instead (B null): row-major (K, N), never transposed.
  const uint16_t* B_bits = nullptr;
  // With trans_a, M floats (zero at the start) to which the avx512_bf16 build adds each row of op(A)
  // in order of k as it packs it (gemm_bf16_weight_and_bias_grad: the bias gradient), or null.
  float* a_row_sums = nullptr;
};

namespace {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [begin, end) of `count` items for thread t of T, in whole units of `unit`.
inline std::pair<int64_t, int64_t> share(int64_t count, int64_t unit, int t, int T) {
  const int64_t per = ceil_div(ceil_div(count, unit), T) * unit;
  return {std::min(count, t * per), std::min(count, (t + 1) * per)};
}

// How a product's threads split it: panels of op(B) (each thread packs only its own) while there
// are a few for each; else rows of C, each thread then packing all the panels for itself (gemm_blocked)
// or the threads packing each B block together (gemm_bf16: walk_shared_b_blocks). A
// transposed A is packed by the thread that uses it, so threads take its rows (each packs only its
// own), unless there are too few. Below parallel_min multiply-adds, or inside a parallel region
// already, one thread does it all: forking costs a few microseconds.
// a_prepared_per_thread: each thread prepares all of op(A) it reads, transposed or not (gemm_bf16
// converts it to bf16 pairs; gemm_blocked reads a row-major float32 A in place). Then a panel split
// has every thread prepare all of A (M x K), a row split all of B (N x K): the split goes across the
// longer of M and N where both can be shared (a linear layer's forward, M tokens by N features, by
// rows: on the Bible's shapes each thread had converted all of X).
struct ThreadSplit {
  bool parallel;
  int64_t threads;
  bool by_panels;
};
inline ThreadSplit split_threads(const Product& p, int64_t panels, int64_t tile_rows, int64_t parallel_min,
                                 int64_t max_threads, bool a_prepared_per_thread = false) {
  // Inside another region (attention's loop over heads) a region of its own gets one thread anyway,
  // and libgomp's set-up of that team cost a 36 x 64 x 36 bf16 head a quarter of its time.
  const bool parallel = p.M * p.N * p.K >= parallel_min && !omp_in_parallel();
  const int64_t threads = parallel ? max_threads : 1;
  const bool enough_panels = panels >= 2 * threads, enough_rows = ceil_div(p.M, tile_rows) >= 4 * threads;
  if (a_prepared_per_thread) return {parallel, threads, enough_panels && (!enough_rows || p.M < p.N)};
  return {parallel, threads, p.trans_a ? !enough_rows && enough_panels : enough_panels};
}

// Runs worker(t, T) for each of the split's T threads. Below the threshold no OpenMP region at all:
// with its `if` false, libgomp still sets up a team of one (about a microsecond: docs/performance.md,
// GELU's int8 form), which attention's small per-head products would pay thousands of times a step.
template <class Worker>
void run_workers(const ThreadSplit& split, const Worker& worker) {
  if (!split.parallel) return worker(0, 1);
#pragma omp parallel num_threads(static_cast<int>(split.threads))
  worker(omp_get_thread_num(), omp_get_num_threads());
}

// The shared buffer of walk_shared_b_blocks (below), in panels of a whole K block: a block of panels, or as many
// narrower blocks as there are K blocks to share a phase.
inline int64_t shared_b_panels(int64_t panels, int64_t panels_per_block, int64_t K, int64_t kc) {
  return std::min(panels_per_block, ceil_div(K, kc) * std::min(panels, panels_per_block));
}

// A row split's walk over op(B) packed per call, each B block packed once for all the threads: for
// each block (panels [pb, pb + np) over k in [k0, k0 + kcur)) the threads pack their share of its
// panels into one shared buffer (pack(pb, q0, q1, k0, kcur, slot): the block's panels [q0, q1)), wait
// for each other, multiply each its own rows by the whole block (multiply(pb, np, k0, kcur, slot)),
// and wait again before the buffer is packed anew. Each thread packing all of B for itself read and
// converted B once per thread (pack_b_panel had 6.6% of a Bible bf16 step on a Zen 4). gemm_bf16
// walks so; gemm_blocked does not: its float32 packing is a plain copy, cheaper than the barriers.
// The buffer holds panels_per_block panels of a whole K block; where a block has fewer panels (op(B)
// narrower than the buffer), consecutive K blocks share one packing phase, block s of the phase in
// `slot` s (the caller's offset: s times np panels of a whole K block), so that a weight's gradient
// (256 x 256 x 6000: twelve K blocks, 24 barriers) meets at two barriers, not one pair per K block:
// a passive barrier costs tens of microseconds where one thread waits (libgomp's futex). The last
// phase skips its closing barrier (the region's end is one). The bits do not change: a block's
// contents are the same whoever packs them and whenever. `in_region`: the walk runs inside the
// product's own OpenMP region (outside it, an orphaned barrier would bind to a caller's region);
// every thread of the region must walk, those without rows too. `even_k`: a last K block of odd
// length is rounded up to even (bf16 pairs).
template <class Pack, class Multiply>
void walk_shared_b_blocks(int64_t panels, int64_t panels_per_block, int64_t K, int64_t kc, bool even_k, int t, int T,
                          bool in_region, const Pack& pack, const Multiply& multiply) {
  const auto block_length = [&](int64_t k0) {
    const int64_t left = K - k0;
    return std::min(kc, even_k ? left + (left & 1) : left);
  };
  for (int64_t pb = 0; pb < panels; pb += panels_per_block) {
    const int64_t np = std::min(panels_per_block, panels - pb);
    const int64_t slots = std::max<int64_t>(1, panels_per_block / np), phase_k = slots * kc;
    const auto [q0, q1] = share(np, 1, t, T);
    for (int64_t phase0 = 0; phase0 < K; phase0 += phase_k) {
      const int64_t phase1 = std::min(K, phase0 + phase_k);
      if (q0 < q1)
        for (int64_t k0 = phase0, slot = 0; k0 < phase1; k0 += kc, ++slot) pack(pb, q0, q1, k0, block_length(k0), slot);
      if (in_region) {
#pragma omp barrier
      }
      for (int64_t k0 = phase0, slot = 0; k0 < phase1; k0 += kc, ++slot) multiply(pb, np, k0, block_length(k0), slot);
      const bool last = phase1 >= K && pb + np >= panels;
      if (in_region && !last) {
#pragma omp barrier
      }
    }
  }
}

// A 64-byte aligned scratch of T that keeps its memory between calls: a fresh allocation of
// megabytes each call would be an mmap and its page faults every time. One per calling thread
// (and translation unit), holding every worker's slice, so that an allocation failure throws
// before the parallel region (an exception may not leave one).
template <class T>
T* caller_scratch(int64_t n) {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<T, Free> data;
  thread_local int64_t size = 0;
  if (n > size) {
    data.reset(static_cast<T*>(allocate_weights(static_cast<size_t>(n) * sizeof(T))));
    size = n;
  }
  return data.get();
}

// K == 0: C = beta * C (+ bias); beta 0 never reads C.
inline void scale_by_beta(int64_t M, int64_t N, float beta, const float* bias, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float scaled = beta == 0.f ? 0.f : beta * C[i * ldc + j];
      C[i * ldc + j] = bias ? scaled + bias[j] : scaled;
    }
}

}  // namespace
}  // namespace qkv::kernels::blocking
