// Which float32 tile the GEMMs use (wide_tile.h).
#include "qkv/kernels/wide_tile.h"

#include <cstdlib>
#include <string_view>

#include "qkv/core/cpu_features.h"
#include "qkv/core/error.h"
#include "qkv/kernels/isa.h"

namespace qkv::kernels::wide_tile {

namespace {

PairAccumulate choose() {
  const char* env = std::getenv("QKV_FLOAT32_TILE");
  if (!env || !*env) return cpu_features().intel ? avx512_or_null() : nullptr;
  const std::string_view wanted(env);
  if (wanted == "6x16") return nullptr;
  QKV_CHECK(wanted == "6x32", "QKV_FLOAT32_TILE=" << wanted << ": no such tile; expected 6x16 or 6x32");
  QKV_CHECK(avx512_or_null(), "QKV_FLOAT32_TILE=6x32 needs AVX-512 (kernels: " << isa_description() << ")");
  return avx512_or_null();
}

}  // namespace

PairAccumulate chosen_or_null() {
  static const PairAccumulate tile = choose();  // a throw leaves it unset: the next call throws again
  return tile;
}

std::string description() {
  try {
    return chosen_or_null() ? "6 x 32, AVX-512 (two 512-bit FMA ports on Intel)" : "6 x 16, AVX2";
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

PairAccumulate avx512_or_null() { return isa_enabled(Isa::Avx512) ? accumulate_pair_avx512_unchecked : nullptr; }

}  // namespace qkv::kernels::wide_tile
