// The 6 x 32 tile's code (wide_tile.inc) at the baseline (AVX2): each 16-lane FMA as two 8-lane
// ones on the same values, so the tests run the wide tile's blocking on every CPU (wide_tile.h).
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/wide_tile.h"

namespace qkv::kernels::wide_tile {
namespace {
#include "qkv/kernels/wide_tile.inc"
}  // namespace

PairAccumulate model() { return accumulate_pair; }

}  // namespace qkv::kernels::wide_tile
