// AMX's tile registers on the hardware (amx_tile_model.h has the interface, the register plan and
// the model the tests run elsewhere). Included only by translation units built with -mamx-tile and
// -mamx-bf16 / -mamx-int8 (cmake/qkv_isa_sources.cmake), which run only at Isa::Amx: kernels/isa.h
// grants it after Linux has given the process the tile state (arch_prctl).
//
// Each thread configures its eight tiles once per product (palette 1, every tile 16 rows x 64
// bytes) and releases them at the end, so no tile state outlives a call.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "qkv/kernels/amx_tile_model.h"

// GCC names the features __AMX_TILE__ ..., Clang __AMXTILE__ ...
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__)) || \
    !(defined(__AMX_INT8__) || defined(__AMXINT8__))
#error "amx_tiles.h needs -mamx-tile -mamx-bf16 -mamx-int8"
#endif

namespace qkv::kernels::amx {

namespace {

// LDTILECFG's 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

template <Op op>
struct HardwareTiles {
  void configure() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = kTileRowBytes, config.rows[t] = kTileRows;
    _tile_loadconfig(&config);
  }
  void release() { _tile_release(); }
  void begin() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  void begin_from(const void* acc, int64_t stride_bytes) {
    const char* c = static_cast<const char*>(acc);
    _tile_loadd(0, c, stride_bytes);
    _tile_loadd(1, c + kTileRowBytes, stride_bytes);
    _tile_loadd(2, c + kTileRows * stride_bytes, stride_bytes);
    _tile_loadd(3, c + kTileRows * stride_bytes + kTileRowBytes, stride_bytes);
  }
  // The tile numbers are literals: the intrinsics are macros that paste them into the instruction.
  void step(const void* a0, const void* a1, int64_t a_stride, const void* b0, const void* b1, int64_t b_stride) {
    _tile_loadd(4, a0, a_stride);
    _tile_loadd(6, b0, b_stride);
    if constexpr (op == Op::Bf16) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, b1, b_stride);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a1, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_dpbssd(0, 4, 6);
      _tile_loadd(7, b1, b_stride);
      _tile_dpbssd(1, 4, 7);
      _tile_loadd(5, a1, a_stride);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
  void end(void* acc, int64_t stride_bytes) {
    char* c = static_cast<char*>(acc);
    _tile_stored(0, c, stride_bytes);
    _tile_stored(1, c + kTileRowBytes, stride_bytes);
    _tile_stored(2, c + kTileRows * stride_bytes, stride_bytes);
    _tile_stored(3, c + kTileRows * stride_bytes + kTileRowBytes, stride_bytes);
  }
};

}  // namespace
}  // namespace qkv::kernels::amx
