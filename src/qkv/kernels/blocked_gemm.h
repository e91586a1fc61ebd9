// qkv's own SGEMM for training-sized products: C = alpha * op(A) @ op(B) + beta * C, row-major,
// op(A) (M, K), op(B) (K, N), ld* the row strides in elements (the same contract as kernels::sgemm).
//
// Why not OpenBLAS: a training step spent about 80% of its time in OpenBLAS 0.3.21's SGEMM, which
// reaches 0.82-0.90 of this Zen 4's FMA peak on qkv's shapes, packing copies included. gemm_blocked
// runs the 6 x 16 AVX2 tile that gemm_packed uses (or, on Intel with AVX-512, its 6 x 32 twin over
// two panels at a time: wide_tile.h): each thread packs its own panels of op(B) per
// call (no thread waits for another), K in blocks of up to 1024, rows of A read in place (a
// transposed A packed per row block). bench_gemm, same run: 0.98-1.16x OpenBLAS on every training
// shape, about 215 GFLOP/s of the 233 peak on two threads.
//
// Every element of C is one fixed sequence of FMAs whatever the thread count: threads split rows or
// panels, never K, and K's blocks depend on K (and op(A)) alone. With beta 0, C is never read.
//
// bias (N floats, or null) is added to every row as the first K block is stored, after beta * C:
// with beta 0 each element gets alpha * (its first block's sum) + bias rounded once, the bits of
// broadcasting the bias into C and multiplying with beta 1 (what a linear layer did), without
// that pass over C.
#pragma once
#include <cstdint>

#include "qkv/kernels/wide_tile.h"

namespace qkv::kernels {

void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                  const float* bias = nullptr);

// gemm_blocked with a given tile: `pair` (wide_tile.h) takes two panels at a time, null the 6 x 16
// tile alone. gemm_blocked passes wide_tile::chosen_or_null(); the tests pass each (same bits).
void gemm_blocked_with_tile(wide_tile::PairAccumulate pair, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                            float beta, float* C, int64_t ldc, const float* bias = nullptr);

}  // namespace qkv::kernels
