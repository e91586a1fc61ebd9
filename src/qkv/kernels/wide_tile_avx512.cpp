// The 6 x 32 tile on AVX-512 (wide_tile.h), built with -mavx512f (cmake/qkv_isa_sources.cmake);
// wide_tile.cpp hands it out only at Isa::Avx512 and above. Internal linkage for all but the entry
// point, so the linker never hands an AVX2-only caller this file's AVX-512 code.
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/wide_tile.h"

#if !defined(__AVX512F__)
#error "wide_tile_avx512.cpp must be compiled with -mavx512f"
#endif

namespace qkv::kernels::wide_tile {
namespace {
#include "qkv/kernels/wide_tile.inc"
}  // namespace

void accumulate_pair_avx512_unchecked(int rows, const float* const a[], int64_t k_stride, const float* panel0,
                                      const float* panel1, int64_t K, float* acc) {
  accumulate_pair(rows, a, k_stride, panel0, panel1, K, acc);
}

}  // namespace qkv::kernels::wide_tile
