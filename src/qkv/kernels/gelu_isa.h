// The GELU kernels built for each instruction set. gelu_forward and the others (elementwise.h) use
// the AVX-512F build on a CPU that has it (but for one kernel: chosen()), else the AVX2 one; both
// give the same bits, which the tests check by calling each build directly.
#pragma once
#include <cstdint>

namespace qkv::kernels::gelu_isa {

struct Kernels {
  void (*forward)(float* y, const float* x, int64_t n);
  void (*forward_to_quantize)(float* y, const float* x, int64_t n);
  void (*backward)(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
  void (*tanh_forward)(float* y, const float* x, int64_t n);
  void (*tanh_backward)(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
  void (*backward_for_bf16)(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
  void (*tanh_forward_for_bf16)(float* y, const float* x, int64_t n);
  void (*tanh_backward_for_bf16)(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
};

const Kernels& avx2();
// Null below Isa::Avx512 (kernels/isa.h: the CPU lacks it, or QKV_ISA chose a lower level).
const Kernels* avx512_or_null();
// The build the public kernels use.
const Kernels& chosen();

// Defined in gelu_avx512.cpp, the one file compiled with -mavx512f; call only where the CPU has it.
const Kernels& avx512_unchecked();

}  // namespace qkv::kernels::gelu_isa
