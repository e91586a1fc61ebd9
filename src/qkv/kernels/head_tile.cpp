// head_tile.h's choice of build; the AVX-512 one is head_tile_avx512.cpp.
#include "qkv/kernels/head_tile.h"

#include "qkv/kernels/isa.h"

namespace qkv::kernels::head_tile {

Product avx512_or_null() { return isa_enabled(Isa::Avx512) ? product_avx512_unchecked : nullptr; }

}  // namespace qkv::kernels::head_tile
