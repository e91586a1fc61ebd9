// DType: the element types a Tensor can hold, their sizes, and the scalar conversions between the
// floating ones.
//
// - F32 values and gradients; I32 token ids and masks.
// - BF16 (bfloat16: float32's exponent, 8 bits of mantissa) and F16 (IEEE half) store weights in
//   half the memory; the reference ops widen them to float32 inside the op (bf16_to_f32 is exact).
// - I8 quantized weights, always with float32 scales beside them (ops::quantize_linear_weight).
// Rounding to BF16 and F16 is to nearest, ties to even, as PyTorch's .to(torch.bfloat16) and
// .half(); NaN stays NaN (quiet), infinities stay infinite, and a float32 beyond F16's range
// becomes infinite.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "qkv/core/hash.h"  // QKV_HOST_DEVICE

namespace qkv {

enum class DType : uint8_t { F32, I32, BF16, F16, I8 };

const char* dtype_name(DType dtype);   // "f32", "i32", "bf16", "f16", "i8"
// The inverse of dtype_name; false for any other name.
bool parse_dtype(std::string_view name, DType* dtype);
constexpr int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::I32: return 4;
    case DType::BF16:
    case DType::F16: return 2;
    case DType::I8: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

// Storage types of the 16-bit floats: the bits, not a number (arithmetic widens to float first).
struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};

// The DType of a C++ element type, for checked typed access (Tensor::data<T>()).
template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

inline float bf16_to_f32(bfloat16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }
// n bf16 values, given as their bits, widened into `into` (exact); a plain loop the compiler vectorizes.
inline void widen_bf16(const uint16_t* bits, int64_t n, float* into) {
  for (int64_t i = 0; i < n; ++i) into[i] = bits_float(static_cast<uint32_t>(bits[i]) << 16);
}
// The bf16 bits of float32 bits u, rounded to nearest even on the 16 bits dropped: adding 0x7fff
// plus the kept lowest bit carries into the kept bits exactly when the dropped part is above half,
// or half with an odd kept part. A NaN stays a (quiet) NaN. One rule for the CPU and the GPU
// kernels (core/cuda_copy.cu, kernels/cuda/gemm.cu).
QKV_HOST_DEVICE inline uint16_t bf16_bits_of(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline bfloat16 f32_to_bf16(float x) { return {bf16_bits_of(float_bits(x))}; }
float f16_to_f32(float16 h);
float16 f32_to_f16(float x);

}  // namespace qkv
