// gemm_bf16's AMX build (bf16_amx_blocking.h) on a scalar model of the tiles, for every CPU: the
// tests run the build's blocking, padding and packed layout where no AMX is at hand, and compare it
// with bf16_gemm_amx.cpp's results where it is. Not fast, and not chosen by gemm_bf16.
//
// The model follows the Intel SDM's TDPBF16PS: for each row m, pair k and column n in that order,
// a sum from zero += A[m].bf16[2k] * B[k].bf16[2n], then += A[m].bf16[2k + 1] * B[k].bf16[2n + 1],
// each product exact in float32 and each sum rounded to nearest even; then C[m][n] += the sum.
// bf16 denormals read as zero and denormal sums written as zero, whatever MXCSR says.
#include <cmath>
#include <cstring>

#include "qkv/core/dtype.h"
#include "qkv/kernels/bf16_amx_blocking.h"

namespace qkv::kernels::bf16_isa {

namespace {

using bf16_amx::kCols;
using bf16_amx::kTilePairs;
using bf16_amx::kTileRows;
using blocking::Product;

uint32_t word_of(float even, float odd) { return f32_to_bf16(even).bits | uint32_t{f32_to_bf16(odd).bits} << 16; }

// A bf16 (the low or high half of a word) as float32, denormals as zero.
float bf16_value(uint32_t word, int half) {
  const uint32_t bits = (word >> (16 * half)) & 0xffffu;
  if ((bits & 0x7f80u) == 0) return std::signbit(bf16_to_f32(bfloat16{static_cast<uint16_t>(bits)})) ? -0.f : 0.f;
  return bf16_to_f32(bfloat16{static_cast<uint16_t>(bits)});
}

float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }

// Eight tile registers of 16 rows x 64 bytes: C00, C01, C10, C11, A0, A1, B0, B1.
struct EmulatedTiles {
  uint32_t reg[8][kTileRows][kTilePairs];

  void configure() { std::memset(reg, 0, sizeof reg); }
  void release() {}
  void begin() { std::memset(reg, 0, 4 * sizeof reg[0]); }

  void load(int t, const uint32_t* src, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r)
      std::memcpy(reg[t][r], reinterpret_cast<const char*>(src) + r * stride_bytes, sizeof reg[t][r]);
  }

  // One instruction: each row's 32 products summed from zero, then added to the row of C.
  void dot(int c, int a, int b) {
    float(*acc)[kTilePairs] = reinterpret_cast<float(*)[kTilePairs]>(reg[c]);
    for (int64_t m = 0; m < kTileRows; ++m) {
      float sum[kTilePairs] = {};
      for (int64_t k = 0; k < kTilePairs; ++k)
        for (int64_t n = 0; n < kTilePairs; ++n)
          for (int half = 0; half < 2; ++half)
            sum[n] = flush_denormal(sum[n] + bf16_value(reg[a][m][k], half) * bf16_value(reg[b][k][n], half));
      for (int64_t n = 0; n < kTilePairs; ++n) acc[m][n] = flush_denormal(acc[m][n] + sum[n]);
    }
  }

  void step(const uint32_t* a0, const uint32_t* a1, int64_t a_stride, const uint32_t* b0, const uint32_t* b1,
            int64_t b_stride) {
    load(4, a0, a_stride), load(5, a1, a_stride), load(6, b0, b_stride), load(7, b1, b_stride);
    dot(0, 4, 6), dot(1, 4, 7), dot(2, 5, 6), dot(3, 5, 7);
  }

  void end(float* acc, int64_t stride_bytes) {
    for (int c = 0; c < 4; ++c)
      for (int64_t r = 0; r < kTileRows; ++r) {
        char* row = reinterpret_cast<char*>(acc) + ((c / 2) * kTileRows + r) * stride_bytes + (c % 2) * 64;
        std::memcpy(row, reg[c][r], sizeof reg[c][r]);
      }
  }
};

struct EmulatedMachine {
  EmulatedTiles tiles;

  static float a_at(const Product& p, int64_t i, int64_t k) { return p.trans_a ? p.A[k * p.lda + i] : p.A[i * p.lda + k]; }
  static float b_at(const Product& p, int64_t k, int64_t j) { return p.trans_b ? p.B[j * p.ldb + k] : p.B[k * p.ldb + j]; }

  void pack_a_rows(const Product& p, int64_t i0, int64_t i1, int64_t k0, int64_t kc, int64_t pairs, uint32_t* dst) {
    const int64_t rows = bf16_amx::ceil_div(i1 - i0, bf16_amx::kBlockRows) * bf16_amx::kBlockRows;
    std::memset(dst, 0, static_cast<size_t>(rows * pairs) * 4);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t kp = 0; kp < kc / 2; ++kp) {
        const int64_t k = k0 + 2 * kp;
        const float even = k < p.K ? a_at(p, i, k) : 0.f, odd = k + 1 < p.K ? a_at(p, i, k + 1) : 0.f;
        dst[(i - i0) * pairs + kp] = word_of(even, odd);
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
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return blocking::scale_by_beta(M, N, beta, bias, C, ldc);
  bf16_amx::run<EmulatedMachine>(Product{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias}, nullptr,
                                 omp_get_max_threads());
}

void gemm_packed_amx_emulated(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                              int64_t in_features, const float* bias, float* C, int64_t ldc) {
  if (M <= 0 || out_features <= 0) return;
  if (in_features <= 0) return blocking::scale_by_beta(M, out_features, 0.f, bias, C, ldc);
  bf16_amx::run<EmulatedMachine>(
      Product{false, true, M, out_features, in_features, 1.f, A, lda, nullptr, 0, 0.f, C, ldc, bias}, packed,
      omp_get_max_threads());
}

}  // namespace qkv::kernels::bf16_isa
