// The 6 x 32 register tile: the sums of the 6 x 16 tile (micro_tile.h) over two adjacent panels at
// once, with 16-lane AVX-512 FMAs. Each element is still one FMA per k, in k's order, from the value
// the caller starts it at, so gemm_packed and gemm_blocked give the same bits with either tile.
//
// Why two tiles: the float32 peak of a core with two 512-bit FMA ports (Intel Xeon: Sapphire and
// Emerald Rapids) is twice what 8-lane FMAs reach, while a Zen 4 runs a 512-bit FMA as two 256-bit
// halves (a 12 x 32 AVX-512 tile ran slower there than the 6 x 16 AVX2 one: docs/performance.md).
// The 6 x 32 tile keeps the 6 x 16 one's shape of work per k (2 panel loads, 6 broadcasts, 12 FMAs
// into 12 accumulators, 15 registers) at twice the lanes. It is chosen on Intel CPUs with AVX-512;
// QKV_FLOAT32_TILE=6x16 or 6x32 chooses either (6x32 needs Isa::Avx512), to measure both.
#pragma once
#include <cstdint>
#include <string>

namespace qkv::kernels::wide_tile {

// acc (rows x 32 floats, row r at acc + 32 r: columns 0..16 of panel0, then of panel1) += the sums
// over k < K of a[r][k * k_stride] * panel[k * 16 + j], rows 1..6. Panels are K x 16 floats, k-major.
using PairAccumulate = void (*)(int rows, const float* const a[], int64_t k_stride, const float* panel0,
                                const float* panel1, int64_t K, float* acc);

// The float32 GEMMs' tile: the 6 x 32 one, or null for the 6 x 16 one. Read once; throws qkv::Error
// naming QKV_FLOAT32_TILE when it names no tile, or 6x32 where Isa::Avx512 is not enabled.
PairAccumulate chosen_or_null();
// "6 x 32, AVX-512 (two 512-bit FMA ports on Intel)" or "6 x 16, AVX2", or the refusal of
// QKV_FLOAT32_TILE: for qkv --version, which never throws.
std::string description();
// The AVX-512 build, null below Isa::Avx512.
PairAccumulate avx512_or_null();
// The same code at the baseline, each 16-lane FMA as two 8-lane ones: for tests, on every CPU.
PairAccumulate model();

// Defined in wide_tile_avx512.cpp (-mavx512f); call only at Isa::Avx512 and above.
void accumulate_pair_avx512_unchecked(int rows, const float* const a[], int64_t k_stride, const float* panel0,
                                      const float* panel1, int64_t K, float* acc);

}  // namespace qkv::kernels::wide_tile
