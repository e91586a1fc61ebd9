// head_tile.h's choice of build; the AVX-512 one is head_tile_avx512.cpp.
#include "qkv/kernels/head_tile.h"

#include "qkv/kernels/isa.h"

namespace qkv::kernels::head_tile {

void product_avx512_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

Product avx512_or_null() { return isa_enabled(Isa::Avx512) ? product_avx512_unchecked : nullptr; }

}  // namespace qkv::kernels::head_tile
