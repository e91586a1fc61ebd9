// The ops that dispatch on dtype, run for every (device, dtype) case they take, in the manner of
// ggml's test-backend-ops: each case against a scalar reference computed from the operands as
// that case represents them. Only the CPU exists today; a device adds rows to kBackends.
//
// - linear_forward with a LinearWeight: f32 row-major (BLAS) and packed (qkv's GEMM) within
//   float32 summation error of the exact product; bf16 within it of the exact product of the
//   bf16-rounded operands; int8 bit for bit equal to the scalar int8 scheme (int32 sums are exact,
//   one fused multiply-add dequantizes).
// - embedding_forward from f32 and bf16 tables: the rows, exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

struct Backend {
  Device device;
  const char* name;
};
const Backend kBackends[] = {{Device::cpu(), "cpu"}};

// How a case holds the weight: the dtype and whether packed.
struct WeightForm {
  DType dtype;
  bool packed;
  std::string name() const { return std::string(dtype_name(dtype)) + (packed ? "_packed" : ""); }
};

struct LinearCase {
  Backend backend;
  WeightForm form;
};

Tensor random_tensor(const Dims& shape, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(gen);
  return t;
}

LinearWeight weight_in(const WeightForm& form, const Tensor& w) {
  if (form.dtype == DType::F32 && !form.packed) return LinearWeight{w, Tensor()};
  return prepare_linear_weight(w, form.dtype);
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// |got - exact| <= (K + 1) 2^-24 sum |terms| for every output: float32 summation's bound.
void expect_within_summation_error(const Tensor& got, const Tensor& x, const Tensor& w, const Tensor& b, bool bf16,
                                   const std::string& what) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const auto operand = [&](float v) { return bf16 ? round_bf16(v) : v; };
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double exact = b.f32()[n], magnitude = std::fabs(b.f32()[n]);
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(operand(x.f32()[m * K + k])) * operand(w.f32()[n * K + k]);
        exact += p;
        magnitude += std::fabs(p);
      }
      const double bound = static_cast<double>(K + 1) * std::ldexp(1.0, -24) * magnitude;
      ASSERT_LE(std::fabs(got.f32()[m * N + n] - exact), bound) << what << " at (" << m << ", " << n << ")";
    }
}

// The int8 scheme of kernels/int8_gemm.h, one output at a time: quantize the row and the channel,
// sum the int8 products exactly, dequantize with one fused multiply-add.
void expect_int8_scheme(const Tensor& got, const Tensor& x, const Tensor& w, const Tensor& b, const std::string& what) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  std::vector<int8_t> qa(static_cast<size_t>(K)), qw(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    const float sw = kernels::quantize_row(w.f32() + n * K, K, qw.data());
    for (int64_t m = 0; m < M; ++m) {
      const float sa = kernels::quantize_row(x.f32() + m * K, K, qa.data());
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += int64_t{qa[static_cast<size_t>(k)]} * qw[static_cast<size_t>(k)];
      const float want = std::fma(static_cast<float>(acc), sa * sw, b.f32()[n]);
      ASSERT_EQ(got.f32()[m * N + n], want) << what << " at (" << m << ", " << n << ")";
    }
  }
}

class LinearOnEveryBackend : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearOnEveryBackend, MatchesTheScalarReferenceOfItsForm) {
  const LinearCase c = GetParam();
  ASSERT_EQ(c.backend.device, Device::cpu());
  struct Shape {
    int64_t rows, in, out;
  };
  for (const Shape s : {Shape{1, 5, 3}, Shape{4, 16, 16}, Shape{7, 33, 47}, Shape{130, 64, 17}, Shape{3, 257, 40}}) {
    const std::string what = c.form.name() + " " + std::to_string(s.rows) + "x" + std::to_string(s.in) + "->" +
                             std::to_string(s.out);
    const Tensor x = random_tensor(Dims{s.rows, s.in}, static_cast<uint32_t>(s.in * 7 + s.rows));
    const Tensor w = random_tensor(Dims{s.out, s.in}, static_cast<uint32_t>(s.out * 13 + s.in), 0.25f);
    const Tensor b = random_tensor(Dims{s.out}, static_cast<uint32_t>(s.out), 0.5f);
    const LinearWeight lw = weight_in(c.form, w);
    EXPECT_EQ(lw.weight.dtype(), c.form.dtype) << what;
    EXPECT_EQ(lw.weight.layout(), c.form.packed ? Layout::Packed : Layout::Strided) << what;
    const Tensor y = linear_forward(x, lw, b);
    ASSERT_EQ(y.shape(), (Dims{s.rows, s.out})) << what;
    if (c.form.dtype == DType::I8) {
      expect_int8_scheme(y, x, w, b, what);
    } else {
      expect_within_summation_error(y, x, w, b, c.form.dtype == DType::BF16, what);
    }
  }
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  for (const Backend& backend : kBackends)
    for (const WeightForm form : {WeightForm{DType::F32, false}, WeightForm{DType::F32, true},
                                  WeightForm{DType::BF16, kernels::packed_bf16_available()}, WeightForm{DType::I8, true}})
      cases.push_back({backend, form});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Forms, LinearOnEveryBackend, ::testing::ValuesIn(linear_cases()),
                         [](const auto& info) { return std::string(info.param.backend.name) + "_" + info.param.form.name(); });

TEST(LinearWeightErrors, AreRefusedNamingTheForm) {
  const Tensor w = random_tensor(Dims{4, 8}, 1);
  EXPECT_THROW((void)prepare_linear_weight(w, DType::F16), Error);
  EXPECT_THROW((void)prepare_linear_weight(w.to(DType::BF16), DType::I8), Error) << "an f32 weight is needed";
  LinearWeight no_scales = prepare_linear_weight(w, DType::I8);
  no_scales.scale = Tensor();
  try {
    (void)linear_forward(random_tensor(Dims{2, 8}, 2), no_scales, Tensor());
    FAIL() << "an int8 weight without scales must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scales"), std::string::npos) << e.what();
  }
  const LinearWeight packed = prepare_linear_weight(w, DType::F32);
  EXPECT_THROW((void)linear_forward(random_tensor(Dims{2, 9}, 3), packed, Tensor()), Error) << "width mismatch";
}

// linear_forward_many gives each weight what linear_forward gives it, bit for bit: int8 weights of
// one width in one shared product, any other mix (a float32 weight among them, widths that differ)
// in separate calls; a bias may be missing. (B, T, K) inputs keep their leading dims.
TEST(LinearForwardMany, GivesEachWeightTheBitsOfItsOwnCall) {
  const Tensor x = random_tensor(Dims{3, 5, 24}, 11);
  const Tensor wa = random_tensor(Dims{24, 24}, 12), wb = random_tensor(Dims{40, 24}, 13),
               wc = random_tensor(Dims{8, 24}, 14), ba = random_tensor(Dims{24}, 15), bc = random_tensor(Dims{8}, 16);
  for (DType c_dtype : {DType::I8, DType::F32}) {
    const LinearWeight a = prepare_linear_weight(wa, DType::I8), b = prepare_linear_weight(wb, DType::I8),
                       c = prepare_linear_weight(wc, c_dtype);
    const std::vector<Tensor> ys = linear_forward_many(x, {&a, &b, &c}, {ba, Tensor(), bc});
    ASSERT_EQ(ys.size(), 3u);
    const Tensor expected[3] = {linear_forward(x, a, ba), linear_forward(x, b, Tensor()), linear_forward(x, c, bc)};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ys[i].shape(), expected[i].shape()) << i;
      for (int64_t j = 0; j < expected[i].numel(); ++j)
        ASSERT_EQ(ys[i].f32()[j], expected[i].f32()[j]) << "weight " << i << " (" << dtype_name(c_dtype) << ") at " << j;
    }
  }
  const LinearWeight a = prepare_linear_weight(wa, DType::I8);
  EXPECT_THROW((void)linear_forward_many(random_tensor(Dims{2, 9}, 3), {&a}, {Tensor()}), Error) << "width mismatch";
  EXPECT_THROW((void)linear_forward_many(x, {&a}, {}), Error) << "a bias per weight";
}

// activation_linear_forward gives linear_forward(activation_forward(h, act)) bit for bit with every
// weight form but one: an int8 weight, where GELU is the form for quantized values
// (kernels::gelu_forward_to_quantize) applied to each row as it is quantized.
TEST(ActivationLinearForward, GivesTheBitsOfTheActivationThenTheProduct) {
  const Tensor h = scale_forward(random_tensor(Dims{3, 7, 96}, 21), 2.f), w = random_tensor(Dims{40, 96}, 22),
               b = random_tensor(Dims{40}, 23);
  const auto same_bits = [](const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    for (int64_t j = 0; j < want.numel(); ++j) ASSERT_EQ(got.f32()[j], want.f32()[j]) << what << " at " << j;
  };
  for (DType dtype : {DType::F32, DType::BF16, DType::I8})
    for (Activation act : {Activation::ReLU, Activation::GELU, Activation::GELUTanh, Activation::SiLU}) {
      const LinearWeight lw = prepare_linear_weight(w, dtype);
      const std::string what = std::string(dtype_name(dtype)) + " activation " + std::to_string(static_cast<int>(act));
      const Tensor got = activation_linear_forward(h, act, lw, b);
      if (dtype != DType::I8 || act != Activation::GELU) {
        same_bits(got, linear_forward(activation_forward(h, act), lw, b), what);
        continue;
      }
      Tensor mapped = Tensor::empty(h.shape());
      kernels::gelu_forward_to_quantize(mapped.f32(), h.f32(), h.numel());
      same_bits(got, linear_forward(mapped, lw, b), what);
      const Tensor exact = linear_forward(activation_forward(h, act), lw, b);
      float largest = 0.f, worst = 0.f;  // a flip of one 8-bit step moves an output by far less than this
      for (int64_t j = 0; j < exact.numel(); ++j) {
        largest = std::max(largest, std::abs(exact.f32()[j]));
        worst = std::max(worst, std::abs(got.f32()[j] - exact.f32()[j]));
      }
      EXPECT_LE(worst, 1e-3f * largest) << what;
    }
}

class EmbeddingOnEveryBackend : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingOnEveryBackend, LooksUpTheRowsExactly) {
  const DType dtype = GetParam();
  const Tensor table = random_tensor(Dims{11, 9}, 5);
  const Tensor stored = table.to(dtype);
  const Tensor ids = Tensor::from_ids(Dims{2, 4}, {0, 10, 3, 3, 7, 1, 10, 2});
  const Tensor out = embedding_forward(stored, ids);
  ASSERT_EQ(out.shape(), (Dims{2, 4, 9}));
  ASSERT_EQ(out.dtype(), DType::F32);
  const Tensor widened = stored.to(DType::F32);
  for (int64_t n = 0; n < 8; ++n)
    for (int64_t d = 0; d < 9; ++d)
      ASSERT_EQ(out.f32()[n * 9 + d], widened.f32()[ids.i32()[n] * 9 + d]) << dtype_name(dtype);
  EXPECT_THROW((void)embedding_forward(table.to(DType::F16), ids), Error) << "no f16 lookup";
}

INSTANTIATE_TEST_SUITE_P(Tables, EmbeddingOnEveryBackend, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace qkv::ops
