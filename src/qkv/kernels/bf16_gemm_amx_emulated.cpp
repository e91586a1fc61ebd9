// gemm_bf16's AMX build (bf16_amx_blocking.h) on the model of the tiles (amx_tile_model.h), for
// every CPU: the tests run the build's blocking, padding and packed layout where no AMX is at hand,
// and compare it with bf16_gemm_amx.cpp's results where it is. Not fast, and not chosen by gemm_bf16.
#include <cmath>
#include <cstring>

#include "qkv/core/dtype.h"
#include "qkv/kernels/amx_tile_model.h"
#include "qkv/kernels/bf16_amx_blocking.h"

namespace qkv::kernels::bf16_isa {

namespace {

using bf16_amx::kCols;
using blocking::Product;

uint32_t word_of(float even, float odd) { return f32_to_bf16(even).bits | uint32_t{f32_to_bf16(odd).bits} << 16; }

struct EmulatedMachine {
  amx::ModelTiles<amx::Op::Bf16> tiles;

  static float a_at(const Product& p, int64_t i, int64_t k) {
    return p.trans_a ? p.A[k * p.lda + i] : p.A[i * p.lda + k];
  }
  static float b_at(const Product& p, int64_t k, int64_t j) {
    if (p.B_bits) return bf16_to_f32(bfloat16{p.B_bits[k * p.ldb + j]});
    return p.trans_b ? p.B[j * p.ldb + k] : p.B[k * p.ldb + j];
  }

  void pack_a_rows(const Product& p, int64_t i0, int64_t i1, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    const int64_t rows = bf16_amx::ceil_div(i1 - i0, bf16_amx::kBlockRows) * bf16_amx::kBlockRows;
    std::memset(dst, 0, static_cast<size_t>(rows * pairs) * 4);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t kp = 0; kp < kc / 2; ++kp) {
        const int64_t k = k0 + 2 * kp;
        const float even = k < p.K ? a_at(p, i, k) : 0.f, odd = k + 1 < p.K ? a_at(p, i, k + 1) : 0.f;
        dst[bf16_amx::a_word_index(i - i0, kp, pairs)] = word_of(even, odd);
      }
  }

  void pack_b_panel(const Product& p, int64_t col0, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    std::memset(dst, 0, static_cast<size_t>(pairs * kCols) * 4);
    for (int64_t kp = 0; kp < kc / 2; ++kp)
      for (int64_t j = 0; j < kCols && col0 + j < p.N; ++j) {
        const int64_t k = k0 + 2 * kp;
        const float even = k < p.K ? b_at(p, k, col0 + j) : 0.f, odd = k + 1 < p.K ? b_at(p, k + 1, col0 + j) : 0.f;
        dst[kp * kCols + j] = word_of(even, odd);
      }
  }

  void store_block(const float* acc, int rows, int64_t cols, float alpha, float beta, const float* bias, float* C,
                   int64_t ldc) {
    for (int r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        float out = alpha * acc[r * kCols + j];
        if (beta != 0.f) out = std::fma(beta, C[r * ldc + j], out);
        if (bias) out += bias[j];
        C[r * ldc + j] = out;
      }
  }
};

}  // namespace

void gemm_amx_emulated(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                       const float* bias) {
  bf16_amx::gemm<EmulatedMachine>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_amx_emulated_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                              const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  bf16_amx::gemm_b_bits<EmulatedMachine>(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_packed_amx_emulated(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                              int64_t in_features, const float* bias, float* C, int64_t ldc) {
  bf16_amx::gemm_packed<EmulatedMachine>(A, M, lda, packed, out_features, in_features, bias, C, ldc);
}

}  // namespace qkv::kernels::bf16_isa
