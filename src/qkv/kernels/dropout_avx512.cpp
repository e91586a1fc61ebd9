// dropout_row built with AVX-512DQ + VL (CMakeLists.txt gives this file alone those flags): the same
// lanes as the AVX2 build (dropout_lanes.h), with vpmullq for the hash's 64-bit products.
// dropout_isa::avx512dq_or_null() calls in here only on a CPU that has them.
#include "qkv/kernels/dropout_isa.h"
#include "qkv/kernels/dropout_lanes.h"

#if !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "dropout_avx512.cpp must be compiled with -mavx512dq -mavx512vl"
#endif

namespace qkv::kernels::dropout_isa {

RowKernel avx512dq_unchecked() { return dropout_row_lanes; }

}  // namespace qkv::kernels::dropout_isa
