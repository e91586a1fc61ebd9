// The dtypes' scalar conversions and Tensor's byte-generic storage, for every dtype.
//
// - f32 -> bf16 and f32 -> f16 round to nearest, ties to even, against a reference that picks the
//   nearer of the two neighbouring representable values in double precision (f16 also against
//   the compiler's _Float16 conversion); every bf16 and f16 value converts to float and back to
//   itself.
// - Views, copies and conversions of tensors of 1-, 2- and 4-byte elements move exactly the
//   elements an index walk says they should.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "qkv/core/tensor.h"
#include "qkv/io/tensor_file.h"

namespace qkv {
namespace {

// The nearest of the two representable neighbours lo < x < hi in double; a tie goes to the one
// whose last kept bit is 0.
template <class Bits>
Bits nearest_even(double x, Bits lo, Bits hi, double lo_value, double hi_value) {
  const double dlo = x - lo_value, dhi = hi_value - x;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

// bf16 reference: the truncation and the next bf16 up in magnitude bracket a finite float.
uint16_t reference_bf16(float x) {
  const uint32_t u = float_bits(x) & 0x7fffffffu;  // the magnitude's bits; the sign is checked apart
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double lo_value = std::fabs(bf16_to_f32({lo})), hi_value = std::fabs(bf16_to_f32({hi}));
  return nearest_even<uint16_t>(std::fabs(static_cast<double>(x)), lo, hi, lo_value, hi_value);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4);
  EXPECT_EQ(dtype_size(DType::I32), 4);
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::F16), 2);
  EXPECT_EQ(dtype_size(DType::I8), 1);
  for (DType d : {DType::F32, DType::I32, DType::BF16, DType::F16, DType::I8}) {
    DType back = DType::F32;
    ASSERT_TRUE(parse_dtype(dtype_name(d), &back)) << dtype_name(d);
    EXPECT_EQ(back, d);
  }
  DType unused;
  EXPECT_FALSE(parse_dtype("float", &unused));
}

TEST(DType, Bf16RoundsToNearestEvenOnRandomFloats) {
  std::mt19937 gen(7);
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = bits_float(gen());
    if (!std::isfinite(x) || std::fabs(x) >= 3.38e38f) continue;  // the neighbour above would be inf
    ASSERT_EQ(f32_to_bf16(x).bits & 0x7fff, reference_bf16(x)) << "x = " << x;
    ASSERT_EQ(f32_to_bf16(x).bits >> 15, float_bits(x) >> 31) << "sign of " << x;
    ++checked;
  }
  EXPECT_GT(checked, 1900000);
  // Ties: 1 + 2^-8 lies half way between 1 and 1 + 2^-7 (even: 1); 1 + 3 * 2^-8 between 1 + 2^-7
  // and 1 + 2^-6 (even: the upper one).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f + std::ldexp(1.f, -8))), 1.f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f + 3 * std::ldexp(1.f, -8))), 1.f + std::ldexp(1.f, -6));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits_float(0x7f800001u)))))
      << "a NaN whose payload sits in the dropped bits must stay NaN";
}

// The compiler's _Float16 (GCC 12 and later on x86-64) is the reference for half.
#if defined(__FLT16_MAX__)
TEST(DType, F16RoundsAsTheCompilersHalfOnRandomFloats) {
  std::mt19937 gen(11);
  for (int i = 0; i < 2000000; ++i) {
    // Exponents spread over half's range and beyond (subnormals, overflow) more than random bits do.
    const float x = std::ldexp(static_cast<float>(gen()) / 4294967296.f, static_cast<int>(gen() % 48) - 30) *
                    (gen() & 1 ? -1.f : 1.f);
    const _Float16 want = static_cast<_Float16>(x);
    uint16_t want_bits;
    std::memcpy(&want_bits, &want, 2);
    ASSERT_EQ(f32_to_f16(x).bits, want_bits) << "x = " << x;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(65519.f)), 65504.f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.f, -24))), std::ldexp(1.f, -24)) << "smallest subnormal";
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.f, -25))), 0.f) << "half of it ties to even: 0";
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, EverySixteenBitValueRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float v = bf16_to_f32({bits});
    if (!std::isnan(v)) {
      ASSERT_EQ(f32_to_bf16(v).bits, bits) << "bf16 " << b;
    }
    const float h = f16_to_f32({bits});
    _Float16 reference;
    std::memcpy(&reference, &bits, 2);
    if (std::isnan(h)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(reference))) << "f16 " << b;
      continue;
    }
    ASSERT_EQ(h, static_cast<float>(reference)) << "f16 " << b;
    ASSERT_EQ(f32_to_f16(h).bits, bits) << "f16 " << b;
  }
}
#endif

// Fills a tensor of any dtype with distinct byte patterns: element i holds the pattern of i.
void fill_pattern(Tensor& t) {
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  const int64_t E = t.element_size();
  for (int64_t i = 0; i < t.numel(); ++i)
    for (int64_t b = 0; b < E; ++b) bytes[i * E + b] = static_cast<uint8_t>((i * 7 + b * 3 + 1) & 0xff);
}

// The bytes of element (i, j, k) of a 3-D view, by its strides.
std::vector<uint8_t> element_bytes(const Tensor& t, int64_t i, int64_t j, int64_t k) {
  const auto* base = static_cast<const uint8_t*>(t.raw_data());
  const int64_t E = t.element_size();
  const int64_t at = (i * t.strides()[0] + j * t.strides()[1] + k * t.strides()[2]) * E;
  return std::vector<uint8_t>(base + at, base + at + E);
}

class TensorOfEveryDType : public ::testing::TestWithParam<DType> {};

TEST_P(TensorOfEveryDType, ViewsAndCopiesMoveTheRightElements) {
  const DType dtype = GetParam();
  Tensor t = Tensor::empty(Dims{4, 5, 6}, dtype);
  EXPECT_EQ(t.nbytes(), 4 * 5 * 6 * dtype_size(dtype));
  fill_pattern(t);
  // A transposed, narrowed, sliced view copied to a contiguous tensor and back into a strided one.
  const Tensor view = t.transpose(0, 2).narrow(1, 1, 3).slice0(2, 5);  // (3, 3, 4)
  const Tensor copy = view.contiguous();
  ASSERT_TRUE(copy.is_contiguous());
  Tensor back = Tensor::zeros(Dims{4, 5, 6}, dtype);
  back.transpose(0, 2).narrow(1, 1, 3).slice0(2, 5).copy_from(copy);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        const std::vector<uint8_t> want = element_bytes(t, k, j + 1, i + 2);
        ASSERT_EQ(element_bytes(view, i, j, k), want) << dtype_name(dtype) << " view " << i << j << k;
        ASSERT_EQ(element_bytes(copy, i, j, k), want) << dtype_name(dtype) << " copy " << i << j << k;
        ASSERT_EQ(element_bytes(back, k, j + 1, i + 2), want) << dtype_name(dtype) << " back " << i << j << k;
      }
  EXPECT_EQ(t.clone().dtype(), dtype);
  EXPECT_EQ(t.device(), Device::cpu());
}

TEST_P(TensorOfEveryDType, CheckedAccessRefusesAnotherDType) {
  const DType dtype = GetParam();
  const Tensor t = Tensor::zeros(Dims{3}, dtype);
  if (dtype == DType::F32) {
    EXPECT_NO_THROW((void)t.data<float>());
  } else {
    EXPECT_THROW((void)t.data<float>(), Error) << dtype_name(dtype);
  }
  if (dtype == DType::I8) {
    EXPECT_NO_THROW((void)t.data<int8_t>());
  } else {
    EXPECT_THROW((void)t.data<int8_t>(), Error) << dtype_name(dtype);
  }
}

// safetensors files keep every dtype as it is (F32, I32, BF16, F16, I8), byte for byte.
TEST_P(TensorOfEveryDType, SavesAndLoadsByteForByte) {
  const DType dtype = GetParam();
  Tensor t = Tensor::empty(Dims{3, 7}, dtype);
  fill_pattern(t);
  const std::string path = ::testing::TempDir() + "/qkv_dtype_" + dtype_name(dtype) + ".safetensors";
  io::save_tensors(path, {{"t", t.transpose(0, 1)}});  // a strided view is written in logical order
  io::TensorFile file = io::load_tensors(path, io::StReadOptions{.allow_half = true});
  const Tensor back = file.take("t");
  ASSERT_EQ(back.dtype(), dtype);
  ASSERT_EQ(back.shape(), (Dims{7, 3}));
  const Tensor want = t.transpose(0, 1).contiguous();
  EXPECT_EQ(std::memcmp(back.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())), 0);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(DTypes, TensorOfEveryDType,
                         ::testing::Values(DType::F32, DType::I32, DType::BF16, DType::F16, DType::I8),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(TensorConversion, FloatTypesRoundAndWidenExactly) {
  const std::vector<float> values = {0.f, -1.5f, 3.14159265f, 1e-6f, -65504.f, 1e30f, std::ldexp(1.f, -20)};
  const Tensor f = Tensor::from_vector(Dims{static_cast<int64_t>(values.size())}, values);
  const Tensor b = f.to(DType::BF16), h = f.to(DType::F16);
  ASSERT_EQ(b.dtype(), DType::BF16);
  ASSERT_EQ(h.dtype(), DType::F16);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(b.data<bfloat16>()[i].bits, f32_to_bf16(values[i]).bits) << values[i];
    EXPECT_EQ(h.data<float16>()[i].bits, f32_to_f16(values[i]).bits) << values[i];
  }
  EXPECT_EQ(b.to_vector()[2], bf16_to_f32(f32_to_bf16(values[2])));  // to_vector widens
  EXPECT_EQ(b.to(DType::F32).to(DType::BF16).data<bfloat16>()[3].bits, b.data<bfloat16>()[3].bits);
  // A strided view converts element by element in its logical order.
  const Tensor m = Tensor::from_vector(Dims{2, 3}, {1, 2, 3, 4, 5, 6}).transpose(0, 1);
  EXPECT_EQ(m.to(DType::F16).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor i8 = Tensor::empty(Dims{3}, DType::I8);
  i8.data<int8_t>()[0] = -128;
  i8.data<int8_t>()[1] = 0;
  i8.data<int8_t>()[2] = 127;
  EXPECT_EQ(i8.to(DType::F32).to_vector(), (std::vector<float>{-128, 0, 127}));
  EXPECT_EQ(i8.to(DType::I32).to_ids(), (std::vector<int32_t>{-128, 0, 127}));
}

TEST(TensorConversion, WhatCannotBeConvertedIsRefusedNamingIt) {
  const Tensor f = Tensor::zeros(Dims{2});
  try {
    (void)f.to(DType::I8);
    FAIL() << "quantizing without scales must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scales"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)f.to(DType::I32), Error);
  EXPECT_THROW((void)f.data<int32_t>(), Error);
  EXPECT_THROW((void)Tensor::zeros(Dims{2}, DType::I32).to_vector(), Error);
  EXPECT_THROW(Tensor::zeros(Dims{2}, DType::I8).fill(1.f), Error);
}

TEST(TensorPacked, ACopyableStorageThatRefusesViews) {
  Tensor p = Tensor::empty_packed(Dims{3, 5}, DType::I8, 64);
  EXPECT_EQ(p.layout(), Layout::Packed);
  EXPECT_EQ(p.nbytes(), 64);
  EXPECT_EQ(p.describe(), "i8(3, 5, packed)");
  fill_pattern(p);
  const Tensor c = p.clone();
  EXPECT_EQ(std::memcmp(c.raw_data(), p.raw_data(), 64), 0);
  EXPECT_EQ(c.layout(), Layout::Packed);
  EXPECT_THROW((void)p.transpose(0, 1), Error);
  EXPECT_THROW((void)p.reshape(Dims{15}), Error);
  EXPECT_THROW((void)p.slice0(0, 1), Error);
  EXPECT_THROW((void)p.to(DType::F32), Error);
  EXPECT_THROW((void)Tensor::empty_packed(Dims{3, 5}, DType::I8, 14), Error) << "less storage than elements";
  EXPECT_THROW(io::save_tensors(::testing::TempDir() + "/qkv_packed.safetensors", {{"p", p}}), Error)
      << "a kernel's order is not a file format";
}

}  // namespace
}  // namespace qkv
