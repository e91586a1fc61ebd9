// nn::Linear and nn::Embedding under a compute type: the packed float32 product equals the BLAS
// one to float rounding, int8 follows it within the quantisation error, bf16 computes exactly the
// product of the bf16-rounded operands; gradients still flow through the float32 weights.
// Key/value caches take their storage outside the tensor pool.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/generator.h"
#include "qkv/nn/attention.h"

namespace qkv::nn {
namespace {

Tensor uniform_tensor(const Dims& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  uint64_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t.f32()[i] = static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 1000.f;
  }
  return t;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  float m = 0;
  for (int64_t i = 0; i < ac.numel(); ++i) m = std::max(m, std::fabs(ac.f32()[i] - bc.f32()[i]));
  return m;
}

// The layer's output without and with its inference weight.
std::pair<Tensor, Tensor> plain_and_prepared(Linear& layer, const Var& x, ComputeType type) {
  layer.clear_inference_weight();
  const Tensor plain = layer.forward(x).value();
  layer.set_compute_type(type);
  return {plain, layer.forward(x).value()};
}

TEST(LinearComputeType, Float32PackEqualsLinearForwardForEveryRowCountAndWidth) {
  Generator gen(7);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{5, 3}, {16, 16}, {33, 47}, {256, 1000}}) {
    Linear layer(in, out, gen);
    layer.set_compute_type(ComputeType::Float32);
    ASSERT_EQ(layer.inference_weight().weight.layout(), Layout::Packed);
    ASSERT_EQ(layer.inference_weight().weight.dtype(), DType::F32);
    for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{128}, int64_t{257}, int64_t{1000}}) {
      NoGradGuard no_grad;
      const Var x(uniform_tensor(Dims{rows, 1, in}, static_cast<uint64_t>(rows * 31 + in)));
      const auto [want, got] = plain_and_prepared(layer, x, ComputeType::Float32);
      // Both sum `in` products of numbers below 1 in float32, in different orders.
      EXPECT_LE(max_abs_diff(got, want), 1e-6f * static_cast<float>(in)) << in << "x" << out << ", " << rows << " rows";
    }
  }
}

TEST(LinearComputeType, RecordsGradientsThroughTheFloat32Weights) {
  Generator gen(3);
  Linear layer(8, 4, gen);
  Var x(uniform_tensor(Dims{2, 8}, 1), /*requires_grad=*/true);
  const Tensor plain = layer.forward(x).value();
  layer.set_compute_type(ComputeType::Int8);
  const Var y = layer.forward(x);
  EXPECT_TRUE(y.requires_grad()) << "a product that training differentiates must be recorded";
  EXPECT_EQ(y.value().to_vector(), plain.to_vector()) << "training must multiply with the float32 weights";
}

TEST(LinearComputeType, TyingOrClearingDropsTheInferenceWeight) {
  Generator gen(5);
  Linear a(8, 4, gen, /*bias=*/false), b(8, 4, gen, /*bias=*/false);
  a.set_compute_type(ComputeType::Float32);
  a.tie_weight(b.weight);
  EXPECT_FALSE(a.inference_weight().defined()) << "a tied layer must not keep the old weight's pack";
  NoGradGuard no_grad;
  const Var x(uniform_tensor(Dims{3, 8}, 2));
  b.set_compute_type(ComputeType::Int8);
  b.clear_inference_weight();
  EXPECT_EQ(a.forward(x).value().to_vector(), b.forward(x).value().to_vector());
}

TEST(LinearComputeType, Int8FollowsTheFloatProductWithinQuantisationError) {
  Generator gen(11);
  Linear layer(256, 300, gen);
  layer.set_compute_type(ComputeType::Int8);
  EXPECT_EQ(layer.inference_weight().weight.dtype(), DType::I8);
  EXPECT_EQ(layer.inference_weight().scale.numel(), 304) << "scales padded to whole panels of 16";
  NoGradGuard no_grad;
  for (int64_t rows : {int64_t{1}, int64_t{6}, int64_t{300}}) {  // int8 is used for any number of rows
    const Var x(uniform_tensor(Dims{rows, 256}, static_cast<uint64_t>(rows)));
    const auto [want, got] = plain_and_prepared(layer, x, ComputeType::Int8);
    // Rounding to 1/127 of each row's and each channel's range: per product at most
    // |a| s_w / 2 + |w| s_a / 2 + s_a s_w / 4 (kernels/int8_gemm.h); here |a| <= 1, |w| <= 1/16.
    const float s_a = 1.f / 127, s_w = (1.f / 16) / 127;
    const float bound = 256 * (s_w / 2 + (1.f / 16) * s_a / 2 + s_a * s_w / 4);
    const float err = max_abs_diff(got, want);
    EXPECT_LE(err, bound) << rows << " rows";
    EXPECT_GT(err, 0.f) << "an int8 product that equals float32 exactly was not quantized";
  }
}

// Under bf16 the layer multiplies with its bf16 weight through ops::linear_forward, whose product
// of the bf16-rounded operands is checked against double precision in ops/op_dtype_test.cpp.
TEST(LinearComputeType, Bf16MultipliesWithTheBf16Weight) {
  Generator gen(13);
  Linear layer(96, 40, gen);
  layer.set_compute_type(ComputeType::BF16);
  ASSERT_EQ(layer.inference_weight().weight.dtype(), DType::BF16);
  NoGradGuard no_grad;
  const Tensor x = uniform_tensor(Dims{5, 96}, 4);
  const Tensor got = layer.forward(Var(x)).value();
  EXPECT_EQ(got.to_vector(), ops::linear_forward(x, layer.inference_weight(), layer.bias.value()).to_vector());
  // And it is not the float32 product: rounding the operands to 8 bits of mantissa shows.
  layer.clear_inference_weight();
  EXPECT_GT(max_abs_diff(got, layer.forward(Var(x)).value()), 1e-4f);
}

TEST(EmbeddingComputeType, Bf16TablesLookUpTheRoundedRows) {
  Generator gen(17);
  Embedding table(20, 12, gen);
  table.set_compute_type(ComputeType::Int8BF16);
  ASSERT_EQ(table.inference_table().dtype(), DType::BF16);
  NoGradGuard no_grad;
  const Tensor ids = Tensor::from_ids(Dims{2, 3}, {0, 19, 5, 5, 7, 1});
  const Tensor got = table.forward(ids).value();
  const Tensor want = table.weight.value().to(DType::BF16).to(DType::F32);
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t d = 0; d < 12; ++d)
      ASSERT_EQ(got.f32()[n * 12 + d], want.f32()[ids.i32()[n] * 12 + d]) << "position " << n << ", column " << d;
  table.set_compute_type(ComputeType::Int8);
  EXPECT_FALSE(table.inference_table().defined()) << "int8 keeps float32 tables";
}

TEST(ComputeTypeNames, RoundTripAndReadCTranslate2sNames) {
  for (const ComputeType t : {ComputeType::Float32, ComputeType::BF16, ComputeType::Int8, ComputeType::Int8BF16})
    EXPECT_EQ(parse_compute_type(compute_type_name(t)), t);
  EXPECT_EQ(parse_compute_type("float"), ComputeType::Float32);
  EXPECT_EQ(parse_compute_type("bfloat16"), ComputeType::BF16);
  EXPECT_EQ(parse_compute_type("int8_float32"), ComputeType::Int8);
  EXPECT_EQ(parse_compute_type("int8_bfloat16"), ComputeType::Int8BF16);
  try {
    (void)parse_compute_type("int4", "--compute-type");
    FAIL() << "int4 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compute-type 'int4' is not one of float32, bf16, int8, int8_bf16"),
              std::string::npos)
        << e.what();
  }
}

TEST(KVCacheStorage, ComesFromTheSystemAndGoesBackWhenFreed) {
  const PoolStats before = BufferPool::stats();
  {
    const KVCache c = KVCache::with_capacity(16, 4, 160, 64);  // 2.6 MB each for k and v
    const PoolStats during = BufferPool::stats();
    EXPECT_EQ(during.bytes_unpooled - before.bytes_unpooled, 2 * 16 * 4 * 160 * 64 * 4);
    EXPECT_EQ(during.bytes_live, before.bytes_live) << "the cache must not count as pooled memory";
  }
  const PoolStats after = BufferPool::stats();
  EXPECT_EQ(after.bytes_unpooled, before.bytes_unpooled);
  EXPECT_EQ(after.bytes_cached, before.bytes_cached) << "a freed cache must not be kept by the pool";
}

}  // namespace
}  // namespace qkv::nn
