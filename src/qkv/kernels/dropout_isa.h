// dropout_row built for each instruction set: AVX2, and AVX-512DQ + VL, whose 64-bit product
// (vpmullq) replaces the three 32-bit products AVX2 builds it from. Both give the same bits, which
// the tests check by calling each build directly; dropout_row uses the AVX-512 one where the CPU has it.
#pragma once
#include <cstdint>

namespace qkv::kernels::dropout_isa {

using RowKernel = void (*)(float* out, const float* in, int64_t n, float p, uint64_t seed, uint64_t counter);

RowKernel avx2();
// Null below Isa::Avx512 (kernels/isa.h: the CPU lacks it, or QKV_ISA chose a lower level).
RowKernel avx512dq_or_null();
// The build dropout_row uses.
RowKernel chosen();

// Defined in dropout_avx512.cpp, compiled with -mavx512f -mavx512dq -mavx512vl; call only where the
// CPU has them.
RowKernel avx512dq_unchecked();

}  // namespace qkv::kernels::dropout_isa
