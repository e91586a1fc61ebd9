// Elementwise kernels over contiguous float arrays of n elements.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void add(float* out, const float* a, const float* b, int64_t n);            // out = a + b
void add_inplace(float* acc, const float* x, int64_t n);                    // acc += x
void mul(float* out, const float* a, const float* b, int64_t n);            // out = a * b (elementwise)
// The gradient of one factor of mul: d (+)= dy * other.
void mul_backward(float* d, const float* dy, const float* other, int64_t n, bool accumulate);
void scale(float* out, const float* x, float s, int64_t n);                 // out = s * x
void axpy(float* acc, const float* x, float s, int64_t n);                  // acc += s * x
// out[r, :] = x[r, :] + row[:] for rows r of width `width` (x: (rows, width), row: (width)).
void add_row_broadcast(float* out, const float* x, const float* row, int64_t rows, int64_t width);

void relu_forward(float* y, const float* x, int64_t n);
// dx = dy * (x > 0); accumulate adds into dx instead of overwriting.
void relu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);

// SiLU (swish; Marian's activation): y = x sigmoid(x) = x / (1 + e^-x). At -inf / +inf: -0 / inf.
void silu_forward(float* y, const float* x, int64_t n);
// With s = sigmoid(x): dy/dx = s + x s (1 - s) = s (1 + x (1 - s)).
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);

// The four GELU kernels (kernels/gelu.cpp) work on 8 lanes, the tail padded to 8: a value's result
// depends on nothing but the value. On a CPU with AVX-512F they run a build of the same lanes whose
// double-precision steps take 8 lanes at once (kernels/gelu_isa.h): the same bits, 1.2-1.4x faster.
// Measured against double precision (tests/kernels/gelu_test.cpp): forward within 4 ulp everywhere,
// the negative tail included (Phi(x) comes from erfc, 1 + tanh from e / (1 + e), so nothing cancels);
// backward within 4 (exact) and 6 (tanh) ulp of the size of the two terms that cancel at its root
// x = -0.75. At -inf / +inf: forward -0 / inf, backward 0 / 1 (the limits).
//
// Exact GELU as PyTorch's default: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
void gelu_forward(float* y, const float* x, int64_t n);
// GELU for values quantized to 8 bits next (an int8 feed-forward's second product): within
// 1.2e-7 max(1, |x|) of gelu_forward, and 1.5x faster (kernels/gelu_lanes.h).
void gelu_forward_to_quantize(float* y, const float* x, int64_t n);
// dy/dx = Phi(x) + x * phi(x), phi the standard normal density.
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
// gelu_backward in float steps alone, for a bf16-kept input (bf16 precision; gelu_forward_to_quantize
// is the forward's float form, which bf16 precision uses too): kernels/gelu_lanes.h.
void gelu_backward_for_bf16(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);

// GELU's tanh approximation (GPT-2; torch's F.gelu(x, approximate='tanh')):
//   y = 0.5 x (1 + t),  t = tanh(u),  u = k (x + a x^3),  k = sqrt(2 / pi),  a = 0.044715.
void gelu_tanh_forward(float* y, const float* x, int64_t n);
// Product rule, with tanh' = 1 - tanh^2 and du/dx = k (1 + 3 a x^2):
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2).
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
// The same two in float steps alone, for bf16 precision, whose products round the result to bf16
// anyway (kernels/gelu_lanes.h says where they differ and by how much).
void gelu_tanh_forward_for_bf16(float* y, const float* x, int64_t n);
void gelu_tanh_backward_for_bf16(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);

// An activation's backward (relu_backward, silu_backward, gelu_backward, gelu_tanh_backward) whose
// input x was kept as bf16 bits (ops::saved_for_backward): chunks of x widened into a buffer on each
// thread, each chunk's backward run on that thread, the chunks split among the threads in one parallel
// region. The bits of `backward` on x's float32 values (its lanes depend on nothing but the value).
// Widening chunk by chunk in the caller opened a region per 65,536 values, 384 a GPT step.
using ActivationBackward = void (*)(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
void activation_backward_bf16_input(ActivationBackward backward, float* dx, const float* dy, const uint16_t* x,
                                    int64_t n, bool accumulate);

// Inverted dropout: y = x * keep / (1 - p), keep drawn from (seed, offset + i).
void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset);
// The mask is regenerated from (seed, offset): dx = dy * keep / (1 - p).
void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate);

}  // namespace qkv::kernels

namespace qkv::kernels {
// out[c] += sum_r x[r, c] for x (rows, cols): the bias gradient of a linear layer.
void column_sum_accumulate(float* out, const float* x, int64_t rows, int64_t cols);
// out[r, :] = row[:] for every r: the bias broadcast of a linear layer's output.
void broadcast_rows(float* out, const float* row, int64_t rows, int64_t cols);
}  // namespace qkv::kernels
