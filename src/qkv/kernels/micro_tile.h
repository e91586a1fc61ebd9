// The 6 x 16 register tile shared by gemm_packed (weights packed once, inference) and gemm_blocked
// (both operands packed per call, training): acc[r][0..16) += sum_k a_r[k] * panel[k][0..16).
//
// AVX2 has 16 vector registers: 6 rows x 2 vectors = 12 accumulators, plus the 2 panel vectors of
// the current k and 1 broadcast of A, leaves one spare. Each k issues 12 FMAs for 2 panel loads and
// 6 broadcasts, enough to keep both FMA ports busy. (A 12 x 32 AVX-512 tile was slower on Zen 4,
// which runs a 512-bit FMA as two 256-bit halves: docs/performance.md.)
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

namespace qkv::kernels::tile {

constexpr int kRows = 6;
constexpr int64_t kCols = 16;

struct Acc {
  __m256 lo[kRows], hi[kRows];  // columns 0..8 and 8..16 of each row
};

inline Acc splat(__m256 lo, __m256 hi) {
  Acc acc;
  for (int r = 0; r < kRows; ++r) acc.lo[r] = lo, acc.hi[r] = hi;
  return acc;
}

// Adds the K products of rows a[0..Rows) with the panel (K x 16 floats, 32-byte aligned, k-major)
// into acc's first Rows rows. Row r's k-th element is a[r][k * k_stride]: k_stride 1 reads rows of a
// row-major A in place, k_stride 6 reads a block packed k-major (a[r] = block + r).
// Every row's sum runs over k in order, so a row's result does not depend on the other rows nor on
// Rows: a product of M rows may cut them into tiles of any heights and get the same bits.
// The twelve accumulators are named variables in the loop, not the array: GCC kept an array of them
// on the stack and stored every one at each k (67% of decoding time went to those stores). Rows
// below 6 leave the unused ones out at compile time (`if constexpr`).
// A tile of 4 or more rows keeps both FMA ports busy (8 or more independent sums of 4-cycle FMAs);
// below 4 it is bound by the FMA latency, and costs about what 4 rows cost.
template <int Rows = kRows>
inline void accumulate(const float* const a[], int64_t k_stride, const float* panel, int64_t K, Acc& acc) {
  static_assert(Rows >= 1 && Rows <= kRows);
  const float *a0 = a[0], *a1 = a[Rows > 1 ? 1 : 0], *a2 = a[Rows > 2 ? 2 : 0], *a3 = a[Rows > 3 ? 3 : 0],
              *a4 = a[Rows > 4 ? 4 : 0], *a5 = a[Rows > 5 ? 5 : 0];
  __m256 c00 = acc.lo[0], c01 = acc.hi[0], c10 = acc.lo[1], c11 = acc.hi[1], c20 = acc.lo[2], c21 = acc.hi[2];
  __m256 c30 = acc.lo[3], c31 = acc.hi[3], c40 = acc.lo[4], c41 = acc.hi[4], c50 = acc.lo[5], c51 = acc.hi[5];
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_load_ps(panel + k * kCols), w1 = _mm256_load_ps(panel + k * kCols + 8);
    const int64_t at = k * k_stride;
    __m256 x = _mm256_broadcast_ss(a0 + at);
    c00 = _mm256_fmadd_ps(x, w0, c00), c01 = _mm256_fmadd_ps(x, w1, c01);
    if constexpr (Rows > 1) {
      x = _mm256_broadcast_ss(a1 + at);
      c10 = _mm256_fmadd_ps(x, w0, c10), c11 = _mm256_fmadd_ps(x, w1, c11);
    }
    if constexpr (Rows > 2) {
      x = _mm256_broadcast_ss(a2 + at);
      c20 = _mm256_fmadd_ps(x, w0, c20), c21 = _mm256_fmadd_ps(x, w1, c21);
    }
    if constexpr (Rows > 3) {
      x = _mm256_broadcast_ss(a3 + at);
      c30 = _mm256_fmadd_ps(x, w0, c30), c31 = _mm256_fmadd_ps(x, w1, c31);
    }
    if constexpr (Rows > 4) {
      x = _mm256_broadcast_ss(a4 + at);
      c40 = _mm256_fmadd_ps(x, w0, c40), c41 = _mm256_fmadd_ps(x, w1, c41);
    }
    if constexpr (Rows > 5) {
      x = _mm256_broadcast_ss(a5 + at);
      c50 = _mm256_fmadd_ps(x, w0, c50), c51 = _mm256_fmadd_ps(x, w1, c51);
    }
  }
  acc.lo[0] = c00, acc.hi[0] = c01, acc.lo[1] = c10, acc.hi[1] = c11, acc.lo[2] = c20, acc.hi[2] = c21;
  acc.lo[3] = c30, acc.hi[3] = c31, acc.lo[4] = c40, acc.hi[4] = c41, acc.lo[5] = c50, acc.hi[5] = c51;
}

// accumulate for the first 8 columns of the panel only (acc.hi untouched): the last panel of a
// product whose N leaves at most 8 columns there (an attention head's Q K^T over 40 keys: 16 + 16
// + 8). Each column's sum is the same FMAs in the same order, so the bits are accumulate's. Six
// chains of 4-cycle FMAs do not fill two ports, but the tile takes 4 cycles a k against 6.
template <int Rows = kRows>
inline void accumulate_low_half(const float* const a[], int64_t k_stride, const float* panel, int64_t K, Acc& acc) {
  static_assert(Rows >= 1 && Rows <= kRows);
  const float *a0 = a[0], *a1 = a[Rows > 1 ? 1 : 0], *a2 = a[Rows > 2 ? 2 : 0], *a3 = a[Rows > 3 ? 3 : 0],
              *a4 = a[Rows > 4 ? 4 : 0], *a5 = a[Rows > 5 ? 5 : 0];
  __m256 c0 = acc.lo[0], c1 = acc.lo[1], c2 = acc.lo[2], c3 = acc.lo[3], c4 = acc.lo[4], c5 = acc.lo[5];
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w = _mm256_load_ps(panel + k * kCols);
    const int64_t at = k * k_stride;
    c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + at), w, c0);
    if constexpr (Rows > 1) c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + at), w, c1);
    if constexpr (Rows > 2) c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + at), w, c2);
    if constexpr (Rows > 3) c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + at), w, c3);
    if constexpr (Rows > 4) c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a4 + at), w, c4);
    if constexpr (Rows > 5) c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a5 + at), w, c5);
  }
  acc.lo[0] = c0, acc.lo[1] = c1, acc.lo[2] = c2, acc.lo[3] = c3, acc.lo[4] = c4, acc.lo[5] = c5;
}

// accumulate (or, for `low_half`, accumulate_low_half) for a tile of `rows` rows (1 to 6) chosen
// at run time.
inline void accumulate_rows(int rows, const float* const a[], int64_t k_stride, const float* panel, int64_t K,
                            Acc& acc, bool low_half = false) {
  const auto run = [&](auto height) {
    constexpr int kHeight = decltype(height)::value;
    if (low_half) accumulate_low_half<kHeight>(a, k_stride, panel, K, acc);
    else accumulate<kHeight>(a, k_stride, panel, K, acc);
  };
  switch (rows) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    default: return run(std::integral_constant<int, 6>{});
  }
}

// The height of the next tile when `left` rows remain: 6, except that the last 7 to 9 rows go as
// 4 + 3, 4 + 4 and 5 + 4. A tile below 4 rows is bound by the FMA latency and costs about what 4
// rows cost, so a remainder of 1 to 3 after whole 6-row tiles cost nearly a tile more: 128 rows
// (32 sentences x beam 4) as 21 x 6 + 2 took the time of 22 whole tiles, as 20 x 6 + 4 + 4 that of
// 21 1/3.
inline int rows_of_next_tile(int64_t left) {
  if (left <= kRows) return static_cast<int>(left);
  if (left <= 8) return 4;
  if (left == 9) return 5;
  return kRows;
}

}  // namespace qkv::kernels::tile
