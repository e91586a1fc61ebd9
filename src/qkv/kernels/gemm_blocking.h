// What the blocked GEMMs share (gemm_blocked in blocked_gemm.cpp, gemm_bf16's avx512_bf16 build):
// the product's operands and how threads split it.
//
// Included by translation units built for different instruction sets, so the functions have
// internal linkage (an unnamed namespace): each unit keeps its own copy, and the linker can never
// hand an AVX2-only caller the copy compiled with AVX-512.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

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
