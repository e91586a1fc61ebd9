// Attention heads' products whose op(B) is B itself, row-major (P V, P^T dO, dS K, dS^T Q), on
// 16-lane FMAs where the CPU has AVX-512: a tile of up to 6 rows x 64 columns reads B in place, so a
// head of dk <= 64 takes one tile a row block where gemm_blocked's 6 x 16 tile took four, each paying
// its set-up, B's packing and its store for only K = T = 24-80 multiply-adds (0.73x OpenBLAS's
// AVX-512 small-matrix kernels on a Zen 4 that shows AVX-512: docs/performance.md, 2026-11-30).
//
// Each element of C is gemm_blocked's sum: FMAs over k in order from zero, then alpha and beta
// applied as its store applies them; so the bits are gemm_blocked's (tests/kernels/head_tile_test.cpp)
// and a head's results do not depend on which of the two runs it.
#pragma once
#include <cstdint>

namespace qkv::kernels::head_tile {

// C (M x N, row stride ldc) = alpha * op(A) @ B + beta * C; op(A) is A (M x K, row stride lda) or,
// trans_a, A^T (A stored K x M); B is K x N, row stride ldb. Needs N <= kMaxColumns and
// K <= kMaxK (one K block of gemm_blocked's, whichever A), M >= 1; beta 0 never reads C.
using Product = void (*)(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
constexpr int64_t kMaxColumns = 64, kMaxK = 512;

// The AVX-512 build at Isa::Avx512 and above (kernels/isa.h), else null.
Product avx512_or_null();

// The AVX-512 build itself (head_tile_avx512.cpp): call it through avx512_or_null().
void product_avx512_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace qkv::kernels::head_tile
