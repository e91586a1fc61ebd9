#include "qkv/core/dtype.h"

#include "qkv/core/device.h"

namespace qkv {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I8: return "i8";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* dtype) {
  for (DType d : {DType::F32, DType::I32, DType::BF16, DType::F16, DType::I8})
    if (name == dtype_name(d)) {
      *dtype = d;
      return true;
    }
  return false;
}

// IEEE half: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; subnormals below 2^-14.
float f16_to_f32(float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);  // 2^-24
  return sign ? -magnitude : magnitude;
}

// Rounds to nearest even. Values of magnitude >= 65520 (half way past the largest half, 65504)
// overflow to infinity; below 2^-14 the result is subnormal, rounded on the bits that fall off.
float16 f32_to_f16(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN
  if (a >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: infinity
  if (a >= 0x38800000u) {  // normal half: rebias the exponent, round the 13 dropped bits
    const uint32_t rebased = a - (112u << 23);
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return {static_cast<uint16_t>(sign | (rounded >> 13))};
  }
  if (a < 0x33000000u) return {sign};  // below half the smallest subnormal (2^-25): zero
  // Subnormal half: the float's mantissa with its implicit bit, shifted to units of 2^-24.
  const uint32_t exponent = a >> 23, mantissa = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24 for exponents 102..112
  const uint32_t kept = mantissa >> shift, dropped = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  const uint32_t rounded = kept + ((dropped > half || (dropped == half && (kept & 1u))) ? 1u : 0u);
  return {static_cast<uint16_t>(sign | rounded)};
}


}  // namespace qkv
