// The GELU kernels built with AVX-512F (CMakeLists.txt gives this file alone -mavx512f): the same
// lanes as the AVX2 build (gelu_lanes.h), with their double-precision steps on 8 lanes at once.
// gelu_isa::avx512_or_null() calls in here only on a CPU that has AVX-512F.
#include "qkv/kernels/gelu_isa.h"
#include "qkv/kernels/gelu_lanes.h"

#if !defined(__AVX512F__)
#error "gelu_avx512.cpp must be compiled with -mavx512f"
#endif

namespace qkv::kernels::gelu_isa {

const Kernels& avx512_unchecked() {
  static const Kernels kernels = this_builds_kernels();
  return kernels;
}

}  // namespace qkv::kernels::gelu_isa
