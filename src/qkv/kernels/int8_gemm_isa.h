// The int8 GEMM (int8_gemm.h) built for each instruction set: AVX2 (vpmaddwd on int16 activations),
// AVX-512 VNNI (vpdpbusd on u8 activations) and AMX (TDPBSSD on int8 activations, the weights
// repacked per call into tiles: int8_amx_blocking.h). gemm_int8 runs the AMX build where
// kernels/isa.h enables Isa::Amx, else VNNI where it enables Isa::Avx512Vnni, else AVX2. All read
// the same QuantizedWeights and sum exactly in int32, so they give the same bits, which the tests
// check by calling each build directly (the AMX build also on its model of the tiles, everywhere).
#pragma once
#include <cstdint>

#include "qkv/kernels/int8_gemm.h"

namespace qkv::kernels::int8_isa {

using Gemm = void (*)(const float* A, int64_t M, int64_t lda, const QuantizedWeights& W, const float* bias_or_null,
                      float* C, int64_t ldc);
// gemm_int8_many with one build, each row of A mapped first where `map` is not null.
using GemmMany = void (*)(const float* A, int64_t M, int64_t lda, RowMap map, const Int8Product* products,
                          int64_t count);

Gemm avx2();
// Null below Isa::Avx512Vnni (the CPU lacks it, or QKV_ISA chose a lower level).
Gemm vnni_or_null();
// Null below Isa::Amx.
Gemm amx_or_null();
// The tile build where the CPU has AMX (best_isa()), whatever level is active: for the tests. Null
// elsewhere.
Gemm amx_where_the_cpu_has_it();
// The AMX build on the model of the tiles (amx_tile_model.h): for tests, on every CPU; slow.
Gemm amx_model();
// The build gemm_int8 uses for products of many rows.
Gemm chosen();
// The gemm_int8_many that runs a product of M rows: chosen()'s, except that where that is the AMX
// build, products of fewer than kAmxMinRows rows run the VNNI build (a decoding step's few rows:
// TDPBSSD's 16-row tiles were half full or less, and the AMX build 0.4-0.6x the VNNI one at 4 rows
// on an Intel Xeon with AMX, bench_int8_gemm, 2026-12-02). Every build gives the same bits.
constexpr int64_t kAmxMinRows = 32;
GemmMany chosen_many(int64_t M);

// What a build plugs into the driver both share (int8_gemm.cpp: quantize the rows, then split the
// panels among the threads).
struct Build {
  int64_t activation_bytes;  // of one quantized activation: 2 (int16) or 1 (u8)
  int64_t panels_per_tile;   // the threads' blocks of panels are made a multiple of this
  int64_t rows_per_tile;     // rows of one micro-kernel call: the threads' shares of rows are multiples of it
  // Quantizes x[0..n) into q[0..padded) (the padding too) and returns the row's scale.
  float (*quantize_row)(const float* x, int64_t n, int64_t padded, void* q);
  // C rows [0, M) x the columns of panels [p_begin, p_end), from the quantized rows Aq (row stride
  // W.padded_in_features() activations) and their scales.
  void (*block_product)(const void* Aq, const float* a_scales, int64_t M, const QuantizedWeights& W, int64_t p_begin,
                        int64_t p_end, const float* bias_or_null, float* C, int64_t ldc);
};

// 127 / max|x| and the scale max|x| / 127 of a row; both 0 below kNegligibleMax (int8_gemm.cpp).
struct RowScale {
  float inverse, scale;
};
RowScale row_scale(float max_abs);

// Defined in int8_gemm_vnni.cpp, the one file compiled with AVX-512 VNNI; use only where the CPU
// has it. A constant: nothing of that file runs before it is called.
const Build& vnni_build_unchecked();
// Defined in int8_gemm_amx.cpp (AMX and AVX-512 flags); use only at Isa::Amx. The same constness.
const Build& amx_build_unchecked();
// Defined in int8_gemm_amx_emulated.cpp, for every CPU.
const Build& amx_model_build();

}  // namespace qkv::kernels::int8_isa
