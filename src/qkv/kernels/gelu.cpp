// The exact and tanh GELU kernels (elementwise.h), AVX2 build, and the choice of build at run time.
#include "qkv/kernels/gelu_isa.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/gelu_lanes.h"
#include "qkv/kernels/elementwise.h"

namespace qkv::kernels {

namespace gelu_isa {

const Kernels& avx2() {
  static const Kernels kernels = this_builds_kernels();
  return kernels;
}

const Kernels* avx512_or_null() {
  return isa_enabled(Isa::Avx512) ? &avx512_unchecked() : nullptr;
}

// The AVX-512F build where the CPU has it, except GELU-tanh's backward, whose AVX-512F build ran 3%
// slower on Zen 4 (bench_gelu, 1 and 2 threads): its float steps outnumber the double ones.
const Kernels& chosen() {
  static const Kernels kernels = [] {
    const Kernels* wide = avx512_or_null();
    if (!wide) return avx2();
    return Kernels{wide->forward,           wide->forward_to_quantize,   wide->backward,
                   wide->tanh_forward,      avx2().tanh_backward,        wide->backward_for_bf16,
                   wide->tanh_forward_for_bf16, wide->tanh_backward_for_bf16};
  }();
  return kernels;
}

}  // namespace gelu_isa

void gelu_forward(float* y, const float* x, int64_t n) { gelu_isa::chosen().forward(y, x, n); }

void gelu_forward_to_quantize(float* y, const float* x, int64_t n) { gelu_isa::chosen().forward_to_quantize(y, x, n); }

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  gelu_isa::chosen().backward(dx, dy, x, n, accumulate);
}

void gelu_tanh_forward(float* y, const float* x, int64_t n) { gelu_isa::chosen().tanh_forward(y, x, n); }

void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  gelu_isa::chosen().tanh_backward(dx, dy, x, n, accumulate);
}

void gelu_backward_for_bf16(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  gelu_isa::chosen().backward_for_bf16(dx, dy, x, n, accumulate);
}

void gelu_tanh_forward_for_bf16(float* y, const float* x, int64_t n) {
  gelu_isa::chosen().tanh_forward_for_bf16(y, x, n);
}

void gelu_tanh_backward_for_bf16(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  gelu_isa::chosen().tanh_backward_for_bf16(dx, dy, x, n, accumulate);
}

}  // namespace qkv::kernels
