// AMX's eight tile registers in plain C++, for every CPU: the model the AMX builds' tests run on
// where no AMX is at hand (bf16_gemm_amx_emulated.cpp, int8_gemm_amx_emulated.cpp). The hardware
// twin is amx_tiles.h; both have the interface of the AMX blockings (bf16_amx_blocking.h,
// int8_amx_blocking.h): configure() and release() around a thread's work, begin() zeroes the four C
// tiles, step() loads two A and two B tiles and adds their four products, end() stores C.
//
// Every tile is 16 rows of 64 bytes (palette 1, the one configuration qkv uses): tiles 0-3 hold C
// (C00, C01, C10, C11: 16 x 16 float32 or int32), 4-5 A's two row tiles, 6-7 B's two column tiles.
// The products follow the Intel SDM's definitions:
//   TDPBF16PS  for each row m, pair k and column n in that order, a sum from zero
//              += A[m].bf16[2k] * B[k].bf16[2n], then += A[m].bf16[2k + 1] * B[k].bf16[2n + 1], each
//              product exact in float32 and each sum rounded to nearest even; then C[m][n] += the
//              sum. bf16 denormals read as zero, denormal sums written as zero, whatever MXCSR says.
//   TDPBSSD    C[m][n] += sum over k of the four products of signed bytes A[m].s8[4k + i] *
//              B[k].s8[4n + i], in int32 (exact here: qkv's sums fit).
// Included by translation units built for different instruction sets: internal linkage only.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "qkv/core/dtype.h"

namespace qkv::kernels::amx {

enum class Op { Bf16, Int8 };  // TDPBF16PS or TDPBSSD

namespace {

constexpr int64_t kTileRows = 16;
constexpr int64_t kTileRowBytes = 64;

// A bf16 (the low or high half of a word) as float32, denormals as zero.
inline float bf16_value(uint32_t word, int half) {
  const auto bits = static_cast<uint16_t>((word >> (16 * half)) & 0xffffu);
  const float x = bf16_to_f32(bfloat16{bits});
  return (bits & 0x7f80u) == 0 ? std::copysign(0.f, x) : x;
}

inline float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }

template <Op op>
struct ModelTiles {
  uint32_t reg[8][kTileRows][kTileRowBytes / 4];

  void configure() { std::memset(reg, 0, sizeof reg); }
  void release() {}
  void begin() { std::memset(reg, 0, 4 * sizeof reg[0]); }
  // C's four tiles loaded from a 32 x 32 block of 4-byte sums (end's layout): the sums go on from there.
  void begin_from(const void* acc, int64_t stride_bytes) {
    for (int c = 0; c < 4; ++c)
      load(c, static_cast<const char*>(acc) + (c / 2) * kTileRows * stride_bytes + (c % 2) * kTileRowBytes,
           stride_bytes);
  }

  void load(int t, const void* src, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r)
      std::memcpy(reg[t][r], static_cast<const char*>(src) + r * stride_bytes, kTileRowBytes);
  }

  void dot(int c, int a, int b) {
    for (int64_t m = 0; m < kTileRows; ++m) {
      if constexpr (op == Op::Bf16) {
        float sum[16] = {}, row[16];
        for (int64_t k = 0; k < 16; ++k)
          for (int64_t n = 0; n < 16; ++n)
            for (int half = 0; half < 2; ++half)
              sum[n] = flush_denormal(sum[n] + bf16_value(reg[a][m][k], half) * bf16_value(reg[b][k][n], half));
        std::memcpy(row, reg[c][m], sizeof row);
        for (int64_t n = 0; n < 16; ++n) row[n] = flush_denormal(row[n] + sum[n]);
        std::memcpy(reg[c][m], row, sizeof row);
      } else {
        int8_t a_row[64], b_row[64];
        std::memcpy(a_row, reg[a][m], 64);
        for (int64_t k = 0; k < 16; ++k) {
          std::memcpy(b_row, reg[b][k], 64);
          for (int64_t n = 0; n < 16; ++n) {
            int32_t sum = 0;
            for (int i = 0; i < 4; ++i) sum += int32_t{a_row[4 * k + i]} * b_row[4 * n + i];
            reg[c][m][n] = static_cast<uint32_t>(static_cast<int32_t>(reg[c][m][n]) + sum);
          }
        }
      }
    }
  }

  void step(const void* a0, const void* a1, int64_t a_stride, const void* b0, const void* b1, int64_t b_stride) {
    load(4, a0, a_stride), load(5, a1, a_stride), load(6, b0, b_stride), load(7, b1, b_stride);
    dot(0, 4, 6), dot(1, 4, 7), dot(2, 5, 6), dot(3, 5, 7);
  }

  // C's four tiles into a 32 x 32 block of 4-byte sums, row stride stride_bytes.
  void end(void* acc, int64_t stride_bytes) {
    for (int c = 0; c < 4; ++c)
      for (int64_t r = 0; r < kTileRows; ++r) {
        char* row = static_cast<char*>(acc) + ((c / 2) * kTileRows + r) * stride_bytes + (c % 2) * kTileRowBytes;
        std::memcpy(row, reg[c][r], kTileRowBytes);
      }
  }
};

}  // namespace
}  // namespace qkv::kernels::amx
