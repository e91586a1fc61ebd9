// What the blocked GEMMs share (gemm_blocked in blocked_gemm.cpp, gemm_bf16's avx512_bf16 build):
// the product's operands and how threads split it.
//
// Included by translation units built for different instruction sets, so the functions have
// internal linkage (an unnamed namespace): each unit keeps its own copy, and the linker can never
// hand an AVX2-only caller the copy compiled with AVX-512.
#pragma once
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
};

namespace {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [begin, end) of `count` items for thread t of T, in whole units of `unit`.
inline std::pair<int64_t, int64_t> share(int64_t count, int64_t unit, int t, int T) {
  const int64_t per = ceil_div(ceil_div(count, unit), T) * unit;
  return {std::min(count, t * per), std::min(count, (t + 1) * per)};
}

// How a product's threads split it: panels of op(B) (each thread packs only its own) while there
// are a few for each; else rows of C, each thread then packing all the panels for itself. A
// transposed A is packed by the thread that uses it, so threads take its rows (each packs only its
// own), unless there are too few. Below parallel_min multiply-adds one thread does it all: forking
// costs a few microseconds.
struct ThreadSplit {
  bool parallel;
  int64_t threads;
  bool by_panels;
};
inline ThreadSplit split_threads(const Product& p, int64_t panels, int64_t tile_rows, int64_t parallel_min,
                                 int64_t max_threads) {
  const bool parallel = p.M * p.N * p.K >= parallel_min;
  const int64_t threads = parallel ? max_threads : 1;
  const bool enough_panels = panels >= 2 * threads, enough_rows = ceil_div(p.M, tile_rows) >= 4 * threads;
  return {parallel, threads, p.trans_a ? !enough_rows && enough_panels : enough_panels};
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
