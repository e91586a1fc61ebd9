// The instruction sets qkv's CPU kernels are built for, and the one they run with: chosen once, from
// CPUID, the best this CPU and its operating system allow, or a lower one named by the environment
// variable QKV_ISA (so that tests and benchmarks run every path a machine has).
//
// The levels are ordered: each includes every one before it.
//   avx2         AVX2 + FMA (the build's baseline, -march=x86-64-v3)
//   avx512       + AVX-512 F, BW, DQ, VL: 16-lane float kernels (GELU, dropout's hash)
//   avx512_vnni  + AVX-512 VNNI: int8 products summed four at a time in int32 (vpdpbusd)
//   avx512_bf16  + AVX512_BF16: bf16 pairs multiplied with float32 sums (vdpbf16ps)
//   amx          + AMX-TILE, AMX-BF16, AMX-INT8, and the kernel's permission to use the tiles
//                (bf16 and int8 products on the tiles; 3.3x the float32 GEMM and 2x the VNNI
//                build on an Intel Xeon with AMX, docs/performance.md, 2026-12-02).
#pragma once
#include <string>

namespace qkv::kernels {

enum class Isa { Avx2, Avx512, Avx512Vnni, Avx512Bf16, Amx };

const char* isa_name(Isa isa);  // "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx"
const char* isa_names();        // "avx2, avx512, avx512_vnni, avx512_bf16, amx"

// The best level this CPU and OS allow.
Isa best_isa();

// The level the kernels use: best_isa(), or QKV_ISA's. Read
// once; throws qkv::Error naming the variable when QKV_ISA names no level or one above best_isa()
// (callers that can report it, the CLI and the Python module, ask at start-up; after a throw every
// later call throws the same).
Isa active_isa();

// Whether the kernels may use `isa`'s instructions: active_isa() >= isa. Never throws (kernels ask
// inside parallel regions): with a QKV_ISA that active_isa() refuses, only avx2 is enabled.
bool isa_enabled(Isa isa) noexcept;

// One line for `qkv --version` and the benchmarks: the level, and what chose it.
// "avx512_bf16 (the best this CPU allows)" or "avx2 (QKV_ISA=avx2; this CPU allows avx512_bf16)".
std::string isa_description();

}  // namespace qkv::kernels
