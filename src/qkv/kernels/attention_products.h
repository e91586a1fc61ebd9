// The matrix products of an attention head in training (attention.cpp's heads, attention_causal's
// blocks): qkv's own GEMM at every length, so that the bits depend neither on how a causal head is
// cut into blocks nor on which kernels OpenBLAS would pick for the CPU. In bf16 precision
// (AttentionDims::bf16_products) the operands are rounded to bf16 and summed in float32, as
// PyTorch's CPU autocast runs scaled_dot_product_attention and the GPU's bf16 flash kernels run
// theirs: Q K^T, P V, and in the backward dO V^T, P^T dO, dS K and dS^T Q.
//
// Measured (`bench_gemm --heads`, 2026-11-29, a Zen 4 without AVX-512): gemm_blocked ran heads of
// 24 to 80 positions at 0.97x and 1.00x OpenBLAS 0.3.21's small-matrix kernels (median over 18
// shapes, two runs; 0.71-1.42x by shape), which the heads below 96 positions used before.
#pragma once
#include <cstdint>

#include "qkv/kernels/attention.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/head_tile.h"
#include "qkv/kernels/product_clock.h"

namespace qkv::kernels {

inline void head_product(const AttentionDims& d, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                         int64_t ldc) {
  if (d.bf16_products) return gemm_bf16(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  // B read in place on AVX-512 (head_tile.h: gemm_blocked's bits); Q K^T and dO V^T (B transposed)
  // keep gemm_blocked's packing.
  static const head_tile::Product in_place = head_tile::avx512_or_null();
  if (in_place && !trans_b && M > 0 && N <= head_tile::kMaxColumns && K > 0 && K <= head_tile::kMaxK) {
    const product_clock::Scope clock("f32", M, N, K, trans_a, trans_b);
    return in_place(trans_a, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  }
  gemm_blocked(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace qkv::kernels
