// nn::linear through PackedLinears: the packed product equals Linear::forward to float rounding,
// gradients still flow through the plain path, and decoding with the packs matches the full
// forward. Key/value caches take their storage outside the tensor pool.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/generator.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/packed_linears.h"

namespace qkv::nn {
namespace {

Tensor random_tensor(const Dims& shape, uint64_t seed) {
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

TEST(PackedLinears, EqualsLinearForwardForEveryRowCountAndWidth) {
  Generator gen(7);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{5, 3}, {16, 16}, {33, 47}, {256, 1000}}) {
    Linear layer(in, out, gen);
    PackedLinears packed;
    packed.add(layer);
    ASSERT_NE(packed.find(layer), nullptr);
    for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{128}, int64_t{257}, int64_t{1000}}) {
      NoGradGuard no_grad;
      const Var x(random_tensor(Dims{rows, 1, in}, static_cast<uint64_t>(rows * 31 + in)));
      const Tensor want = layer.forward(x).value(), got = linear(layer, x, &packed).value();
      // Both sum `in` products of numbers below 1 in float32, in different orders.
      EXPECT_LE(max_abs_diff(got, want), 1e-6f * static_cast<float>(in)) << in << "x" << out << ", " << rows << " rows";
    }
  }
}

TEST(PackedLinears, RecordsGradientsThroughThePlainPath) {
  Generator gen(3);
  Linear layer(8, 4, gen);
  PackedLinears packed;
  packed.add(layer);
  Var x(random_tensor(Dims{2, 8}, 1), /*requires_grad=*/true);
  const Var y = linear(layer, x, &packed);
  EXPECT_TRUE(y.requires_grad()) << "a product that training differentiates must be recorded";
}

TEST(PackedLinears, ALayerWithoutAPackUsesItsWeights) {
  Generator gen(5);
  Linear a(8, 4, gen), b(8, 4, gen);
  PackedLinears packed;
  packed.add(a);
  EXPECT_EQ(packed.find(b), nullptr);
  NoGradGuard no_grad;
  const Var x(random_tensor(Dims{3, 8}, 2));
  EXPECT_EQ(linear(b, x, &packed).value().to_vector(), b.forward(x).value().to_vector());
}

TEST(PackedLinears, Int8PacksFollowTheFloatProductWithinQuantisationError) {
  Generator gen(11);
  Linear layer(256, 300, gen);
  PackedLinears packed(LinearPrecision::Int8);
  packed.add(layer);
  ASSERT_NE(packed.find_int8(layer), nullptr);
  EXPECT_EQ(packed.find(layer), nullptr);
  NoGradGuard no_grad;
  for (int64_t rows : {int64_t{1}, int64_t{6}, int64_t{300}}) {  // int8 is used for any number of rows
    const Var x(random_tensor(Dims{rows, 256}, static_cast<uint64_t>(rows)));
    const Tensor want = layer.forward(x).value(), got = linear(layer, x, &packed).value();
    // Rounding to 1/127 of each row's and each channel's range: per product at most
    // |a| s_w / 2 + |w| s_a / 2 + s_a s_w / 4 (kernels/int8_gemm.h); here |a| <= 1, |w| <= 1/16.
    const float s_a = 1.f / 127, s_w = (1.f / 16) / 127;
    const float bound = 256 * (s_w / 2 + (1.f / 16) * s_a / 2 + s_a * s_w / 4);
    const float err = max_abs_diff(got, want);
    EXPECT_LE(err, bound) << rows << " rows";
    EXPECT_GT(err, 0.f) << "an int8 product that equals float32 exactly was not quantized";
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
