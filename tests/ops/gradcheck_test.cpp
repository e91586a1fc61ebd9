// Finite-difference checks of every differentiable op in qkv/autograd/functions.h (harness and
// tolerance rationale in gradcheck.h). Sizes are tiny: each input element costs four forward passes.
#include "ops/gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "qkv/autograd/functions.h"
#include "qkv/autograd/graph.h"

namespace qkv::test {
namespace {

using V = std::vector<Var>;

class Gradcheck : public ::testing::Test {
 protected:
  void SetUp() override { Graph::current().clear(); }
  void TearDown() override { EXPECT_EQ(Graph::current().size(), 0u) << "a test left nodes on the graph"; }
  std::mt19937_64 rng{20240607};
  Tensor rn(const Dims& s, float scale = 1.f, float shift = 0.f) { return randn(s, rng, scale, shift); }
};

// ---- linear / matmul -----------------------------------------------------------------------------

TEST_F(Gradcheck, LinearWithBias) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::linear(v[0], v[1], v[2]); },
                           {{"x", rn({2, 3, 4})}, {"w", rn({5, 4})}, {"b", rn({5})}}));
}

TEST_F(Gradcheck, LinearWithoutBias) {
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::linear(v[0], v[1], Var()); }, {{"x", rn({3, 4})}, {"w", rn({2, 4})}}));
}

TEST_F(Gradcheck, LinearOnlyWeightRequiresGrad) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::linear(v[0], v[1], v[2]); },
                           {{"x", rn({1, 1, 3}), false}, {"w", rn({2, 3})}, {"b", rn({2}), false}}));
}

TEST_F(Gradcheck, Matmul) {
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::matmul(v[0], v[1]); }, {{"a", rn({2, 3, 4})}, {"b", rn({2, 4, 5})}}));
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::matmul(v[0], v[1]); }, {{"a", rn({3, 2})}, {"b", rn({2, 1})}}));
}

TEST_F(Gradcheck, MatmulTransposeB) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::matmul(v[0], v[1], true); },
                           {{"a", rn({2, 2, 3, 4})}, {"b", rn({2, 2, 5, 4})}}));
}

// ---- embedding / elementwise ---------------------------------------------------------------------

TEST_F(Gradcheck, EmbeddingWithRepeatedIds) {
  const Tensor ids = Tensor::from_ids({2, 4}, {1, 1, 3, 1, 6, 0, 3, 3});
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::embedding(v[0], ids); }, {{"table", rn({7, 3})}}));
}

TEST_F(Gradcheck, Add) {
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::add(v[0], v[1]); }, {{"a", rn({2, 3, 2})}, {"b", rn({2, 3, 2})}}));
}

TEST_F(Gradcheck, Scale) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::scale(v[0], -0.37f); }, {{"x", rn({3, 5})}}));
}

TEST_F(Gradcheck, ReluAwayFromZero) {
  // |x| >= 0.1 > 2h: no point of the stencil crosses the kink at 0.
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::relu(v[0]); }, {{"x", rand_away_from_zero({3, 7}, rng, 0.1f, 2.f)}}));
}

// Options for a smooth activation whose value cancels somewhere: a noise floor of half the largest
// |x|, the size of the terms that cancel (see Gelu).
GradcheckOptions activation_options(const Tensor& x) {
  float max_abs = 0;
  for (float e : x.to_vector()) max_abs = std::max(max_abs, std::abs(e));
  GradcheckOptions opt;
  opt.magnitude_floor = 0.5 * max_abs;
  return opt;
}

TEST_F(Gradcheck, Gelu) {
  // gelu(x) = 0.5 x (1 + erf(x / sqrt 2)). Formed that way in float, 1 + erf cancels for x < 0 and
  // y's rounding error is about u * |0.5 x| (x = -4: y = -1e-4); the kernel now computes x Phi(x)
  // without cancelling, and the noise floor from |x| stays as a bound any float GELU meets.
  const Tensor x = rn({4, 6}, 2.f);
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::gelu(v[0]); }, {{"x", x}}, activation_options(x)));
}

TEST_F(Gradcheck, GeluTanh) {
  // As Gelu: 1 + tanh(u) cancels for x < 0 (the kernel forms it as 2 e / (1 + e) instead).
  const Tensor x = rn({4, 6}, 2.f);
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::gelu_tanh(v[0]); }, {{"x", x}}, activation_options(x)));
}

TEST_F(Gradcheck, Silu) {
  // s (1 + x (1 - s)) crosses 0 near x = -1.28: the same floor as GELU's.
  const Tensor x = rn({4, 6}, 3.f);
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::silu(v[0]); }, {{"x", x}}, activation_options(x)));
}

TEST_F(Gradcheck, ElementwiseProduct) {
  // The gated feed-forward's product (fn::mul): both factors' gradients, and one input used as both.
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::mul(v[0], v[1]); }, {{"a", rn({3, 5})}, {"b", rn({3, 5})}}));
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::mul(v[0], v[0]); }, {{"a", rn({2, 7})}}));
}

TEST_F(Gradcheck, DropoutWithFixedSeed) {
  // The mask is a function of (seed, offset + index) only, so f is linear in x for fixed arguments
  // and the finite difference is exact up to rounding.
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::dropout(v[0], 0.3f, 42, 1000); }, {{"x", rn({3, 11})}}));
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::dropout(v[0], 0.f, 42, 0); }, {{"x", rn({2, 3})}}));
}

// ---- normalisation / softmax ---------------------------------------------------------------------

TEST_F(Gradcheck, LayerNorm) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::layernorm(v[0], v[1], v[2], 1e-5f); },
                           {{"x", rn({2, 3, 5})}, {"weight", rn({5}, 0.5f, 1.f)}, {"bias", rn({5})}}));
}

TEST_F(Gradcheck, LayerNormOffsetRowsAndOnlyX) {
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::layernorm(v[0], v[1], v[2], 1e-5f); },
                   {{"x", rn({4, 6}, 2.f, 3.f)}, {"weight", rn({6}, 0.5f, 1.f), false}, {"bias", rn({6}), false}}));
}

// Weights with a zero entry, and weights just above the smallest magnitude for which the backward
// may recover xhat = (y - bias) / weight from the output instead of keeping x, with a large bias:
// both backward variants must give the gradient of the function.
TEST_F(Gradcheck, LayerNormZeroWeight) {
  Tensor w = rn({6}, 0.5f, 1.f);
  w.f32()[2] = 0.f;
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::layernorm(v[0], v[1], v[2], 1e-5f); },
                           {{"x", rn({3, 6})}, {"weight", w}, {"bias", rn({6})}}));
}

TEST_F(Gradcheck, LayerNormSmallishWeights) {
  Tensor w = rn({6}, 0.5f, 1.f);
  w.f32()[1] = 0.05f;
  w.f32()[4] = -0.02f;
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::layernorm(v[0], v[1], v[2], 1e-5f); },
                           {{"x", rn({3, 6})}, {"weight", w}, {"bias", rn({6})}}));
}

// Regression: small weights with a large bias once made the memory-saving backward (which recovers
// xhat = (y - bias) / weight from the output) lose ~u * |bias / weight| of accuracy; fn::layernorm
// now saves the input whenever |bias| / |weight| or 1 / |weight| is large.
TEST_F(Gradcheck, LayerNormSmallWeightsLargeBias) {
  Tensor w = rn({6}, 0.5f, 1.f);
  w.f32()[1] = 2e-4f;
  w.f32()[4] = -1e-3f;
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::layernorm(v[0], v[1], v[2], 1e-5f); },
                           {{"x", rn({3, 6})}, {"weight", w}, {"bias", rn({6}, 3.f)}}));
}

// Seed 003's LayerNorm: (x - mean) / (unbiased std + eps). Rows are far from constant (std = 0 is
// a kink of the std), on both backward paths (from the output, and from x for small weights).
Var layernorm_seed003(const V& v, float eps) {
  return fn::layernorm(v[0], v[1], v[2], eps, ops::LayerNormVariant::UnbiasedStd);
}

TEST_F(Gradcheck, LayerNormSeed003) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return layernorm_seed003(v, 1e-6f); },
                           {{"x", rn({2, 3, 5})}, {"weight", rn({5}, 0.5f, 1.f)}, {"bias", rn({5})}}));
}

TEST_F(Gradcheck, LayerNormSeed003OffsetRowsLargeEpsAndOnlyX) {
  // eps comparable to the std: the (std + eps) / std factor of the backward is far from 1.
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return layernorm_seed003(v, 0.5f); },
                           {{"x", rn({4, 6}, 0.7f, 3.f)}, {"weight", rn({6}, 0.5f, 1.f), false}, {"bias", rn({6}), false}}));
}

TEST_F(Gradcheck, LayerNormSeed003WidthTwo) {
  // The smallest width with an unbiased std (it divides by C - 1 = 1); eps keeps y smooth in x.
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return layernorm_seed003(v, 0.3f); },
                           {{"x", rn({3, 2})}, {"weight", rn({2}, 0.5f, 1.f)}, {"bias", rn({2})}}));
}

TEST_F(Gradcheck, LayerNormSeed003SmallWeightsLargeBias) {
  Tensor w = rn({6}, 0.5f, 1.f);
  w.f32()[1] = 2e-4f;
  w.f32()[4] = -1e-3f;
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return layernorm_seed003(v, 1e-6f); },
                           {{"x", rn({3, 6})}, {"weight", w}, {"bias", rn({6}, 3.f)}}));
}

// T5's RMSNorm: x / sqrt(mean(x^2) + eps) * weight, no bias (an undefined Var).
Var rms_norm(const V& v, float eps) { return fn::layernorm(v[0], v[1], Var(), eps, ops::LayerNormVariant::RMS); }

TEST_F(Gradcheck, RmsNorm) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return rms_norm(v, 1e-6f); },
                           {{"x", rn({2, 3, 5})}, {"weight", rn({5}, 0.5f, 1.f)}}));
}

TEST_F(Gradcheck, RmsNormOffsetRowsLargeEpsAndOnlyX) {
  // Rows centred away from 0 (RMSNorm does not subtract their mean), eps comparable to mean(x^2).
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return rms_norm(v, 0.5f); },
                           {{"x", rn({4, 6}, 0.7f, 1.f)}, {"weight", rn({6}, 0.5f, 1.f), false}}));
}

TEST_F(Gradcheck, AddRmsNorm) {
  EXPECT_TRUE(gradcheck_ok(
      [](const V& v) { return fn::add_layernorm(v[0], v[1], v[2], Var(), 1e-6f, ops::LayerNormVariant::RMS); },
      {{"a", rn({3, 5})}, {"b", rn({3, 5})}, {"weight", rn({5}, 0.5f, 1.f)}}));
}

TEST_F(Gradcheck, Softmax) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::softmax(v[0]); }, {{"x", rn({2, 3, 6}, 1.5f)}}));
}

// ---- attention -----------------------------------------------------------------------------------

struct AttnCase {
  const char* name;
  int64_t B, H, Tq, Tk, dk;
  bool key_mask, query_mask, causal;
  float p;
};

class GradcheckAttention : public Gradcheck, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(GradcheckAttention, QKV) {
  const AttnCase c = GetParam();
  ops::AttentionMasks m;
  if (c.key_mask) {  // batch row 1 pads its last keys (at least one key stays)
    std::vector<std::vector<int32_t>> rows(c.B, std::vector<int32_t>(c.Tk, 1));
    for (int64_t j = c.Tk / 2 + 1; j < c.Tk; ++j) rows[1 % c.B][j] = 0;
    m.key_keep = mask_rows(rows);
  }
  if (c.query_mask) {  // batch row 0 pads its last query; the last batch row is fully padded
    std::vector<std::vector<int32_t>> rows(c.B, std::vector<int32_t>(c.Tq, 1));
    rows[0][c.Tq - 1] = 0;
    for (auto& x : rows[c.B - 1]) x = 0;
    m.query_keep = mask_rows(rows);
  }
  m.causal = c.causal;
  const ops::AttentionDropoutSpec drop{c.p, 77, 5};
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) { return fn::attention(v[0], v[1], v[2], m, drop); },
      {{"q", rn({c.B, c.H, c.Tq, c.dk})}, {"k", rn({c.B, c.H, c.Tk, c.dk})}, {"v", rn({c.B, c.H, c.Tk, c.dk})}}));
}

INSTANTIATE_TEST_SUITE_P(Masks, GradcheckAttention,
                         ::testing::Values(AttnCase{"plain", 1, 2, 3, 3, 4, false, false, false, 0.f},
                                           AttnCase{"key_mask", 2, 2, 3, 4, 3, true, false, false, 0.f},
                                           AttnCase{"query_mask", 2, 1, 4, 4, 3, false, true, false, 0.f},
                                           AttnCase{"causal", 2, 2, 4, 4, 2, false, false, true, 0.f},
                                           AttnCase{"target_mask", 2, 1, 4, 4, 3, false, true, true, 0.f},
                                           AttnCase{"dropout", 2, 2, 3, 4, 3, true, false, false, 0.3f},
                                           AttnCase{"cross", 2, 1, 2, 5, 3, true, false, false, 0.f},
                                           AttnCase{"cross_causal_dropout", 2, 1, 3, 5, 2, true, true, true, 0.3f},
                                           AttnCase{"t1", 1, 1, 1, 1, 3, false, false, true, 0.f}),
                         [](const ::testing::TestParamInfo<AttnCase>& i) { return std::string(i.param.name); });

TEST_F(Gradcheck, AttentionOnSplitHeadViews) {
  // The seed's shape flow: (B, T, D) -> split_heads (strided view) -> attention -> combine_heads.
  ops::AttentionMasks m;
  m.causal = true;
  m.query_keep = mask_rows({{1, 1, 0}, {1, 1, 1}});
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) {
        return fn::combine_heads(
            fn::attention(fn::split_heads(v[0], 2), fn::split_heads(v[1], 2), fn::split_heads(v[2], 2), m));
      },
      {{"xq", rn({2, 3, 4})}, {"xk", rn({2, 3, 4})}, {"xv", rn({2, 3, 4})}}));
}

TEST_P(GradcheckAttention, MultiHeadOnProjections) {
  const AttnCase c = GetParam();
  ops::AttentionMasks m;
  if (c.key_mask) {  // batch row 0 pads its last key (at least one key stays)
    std::vector<std::vector<int32_t>> rows(c.B, std::vector<int32_t>(c.Tk, 1));
    if (c.Tk > 1) rows[0][c.Tk - 1] = 0;
    m.key_keep = mask_rows(rows);
  }
  m.causal = c.causal;
  const ops::AttentionDropoutSpec drop{c.p, 77, 5};
  const int64_t D = c.H * c.dk;
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::multi_head_attention(v[0], v[1], v[2], c.H, m, drop); },
                           {{"q", rn({c.B, c.Tq, D})}, {"k", rn({c.B, c.Tk, D})}, {"v", rn({c.B, c.Tk, D})}}));
}

TEST_F(Gradcheck, MultiHeadAttentionWithSharedProjection) {
  ops::AttentionMasks m;
  m.causal = true;
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::multi_head_attention(v[0], v[0], v[0], 2, m); },
                           {{"x", rn({2, 3, 4})}}));
}

// T5's attention: unscaled scores plus a position bias (Tq, Tk, H) that has a gradient of its own.
TEST_F(Gradcheck, AttentionWithPositionBiasUnscaledCausal) {
  ops::AttentionMasks m;
  m.causal = true;
  m.scale_scores = false;
  m.key_keep = mask_rows({{1, 1, 1, 1}, {1, 1, 1, 0}});
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::attention(v[0], v[1], v[2], m, {}, nullptr, v[3]); },
                           {{"q", rn({2, 2, 4, 3}, 0.7f)},
                            {"k", rn({2, 2, 4, 3}, 0.7f)},
                            {"v", rn({2, 2, 4, 3})},
                            {"bias", rn({4, 4, 2})}}));
}

// A decoding-shaped cross step (Tq < Tk) on projections, with dropout: the bias's gradient sums
// the batch rows' dropped-out score gradients.
TEST_F(Gradcheck, MultiHeadAttentionWithPositionBiasAndDropout) {
  ops::AttentionMasks m;
  m.causal = true;
  m.scale_scores = false;
  const ops::AttentionDropoutSpec drop{0.3f, 77, 5};
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) { return fn::multi_head_attention(v[0], v[1], v[2], 2, m, drop, nullptr, v[3]); },
      {{"q", rn({2, 2, 6}, 0.7f)}, {"k", rn({2, 5, 6}, 0.7f)}, {"v", rn({2, 5, 6})}, {"bias", rn({2, 5, 2})}}));
}

// T5 computes the bias once and every layer reads it: the layers' gradients add up in its slot.
TEST_F(Gradcheck, AttentionLayersSharingOnePositionBias) {
  ops::AttentionMasks m;
  m.scale_scores = false;
  ops::AttentionMasks causal = m;
  causal.causal = true;
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) {
        Var a = fn::attention(v[0], v[1], v[2], m, {}, nullptr, v[3]);
        return fn::add(a, fn::attention(a, v[0], v[1], causal, {}, nullptr, v[3]));
      },
      {{"q", rn({1, 2, 3, 3}, 0.7f)},
       {"k", rn({1, 2, 3, 3}, 0.7f)},
       {"v", rn({1, 2, 3, 3})},
       {"bias", rn({3, 3, 2})}}));
}

TEST_F(Gradcheck, MaskedFill) {
  ops::AttentionMasks m;
  m.key_keep = mask_rows({{1, 1, 0, 1}, {1, 0, 0, 0}});
  m.query_keep = mask_rows({{1, 0, 1}, {1, 1, 1}});
  m.causal = true;
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::masked_fill(v[0], m); }, {{"scores", rn({2, 2, 3, 4})}}));
}

// ---- shape ops / positional / loss ---------------------------------------------------------------

TEST_F(Gradcheck, SplitAndCombineHeads) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::split_heads(v[0], 3); }, {{"x", rn({2, 3, 6})}}));
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::combine_heads(v[0]); }, {{"x", rn({2, 3, 2, 2})}}));
}

TEST_F(Gradcheck, AddPositional) {
  const Tensor table = ops::sinusoidal_table(6, 4);
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::add_positional(v[0], table); }, {{"x", rn({2, 5, 4})}}));
}

TEST_F(Gradcheck, Reshape) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::reshape(v[0], Dims{3, -1}); }, {{"x", rn({2, 3, 2})}}));
  // A non-contiguous input (a head view) is copied first.
  EXPECT_TRUE(
      gradcheck_ok([](const V& v) { return fn::reshape(fn::split_heads(v[0], 2), Dims{-1}); }, {{"x", rn({1, 3, 4})}}));
}

TEST_F(Gradcheck, CrossEntropy) {
  const Tensor targets = Tensor::from_ids({6}, {3, 0, 1, 4, 0, 2});  // rows 1 and 4 ignored (id 0)
  for (float eps : {0.f, 0.1f}) {
    EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::cross_entropy(v[0], targets, 0, eps); },
                             {{"logits", rn({6, 5}, 2.f)}}))
        << "label_smoothing " << eps;
  }
}

// Logits that nothing else references (a temporary linear output): the loss's backward may reuse
// their buffer for the gradient. The result must be the same as with logits that stay alive.
TEST_F(Gradcheck, CrossEntropyOfTemporaryLogits) {
  const Tensor targets = Tensor::from_ids({5}, {2, 0, 1, 4, 3});
  for (float eps : {0.f, 0.1f}) {
    EXPECT_TRUE(
        gradcheck_ok([&](const V& v) { return fn::cross_entropy(fn::linear(v[0], v[1], v[2]), targets, 0, eps); },
                     {{"x", rn({5, 3})}, {"w", rn({6, 3})}, {"b", rn({6})}}))
        << "label_smoothing " << eps;
  }
}

TEST_F(Gradcheck, CrossEntropyGradientSameWhetherLogitsAreSharedOrNot) {
  const Tensor targets = Tensor::from_ids({4}, {2, 0, 1, 3});
  const Tensor x0 = rn({4, 3}), w0 = rn({5, 3});
  Var x1(x0.clone(), true), w1(w0.clone(), true);
  backward(fn::cross_entropy(fn::linear(x1, w1, Var()), targets, 0, 0.1f));  // logits die with the expression
  Var x2(x0.clone(), true), w2(w0.clone(), true);
  const Var logits = fn::linear(x2, w2, Var());  // kept alive: the loss must not overwrite them
  const std::vector<float> before = logits.value().to_vector();
  backward(fn::cross_entropy(logits, targets, 0, 0.1f));
  EXPECT_EQ(logits.value().to_vector(), before) << "backward overwrote logits that are still referenced";
  EXPECT_EQ(x1.grad().to_vector(), x2.grad().to_vector());
  EXPECT_EQ(w1.grad().to_vector(), w2.grad().to_vector());
}

// ---- a Var used more than once accumulates every gradient ------------------------------------

TEST_F(Gradcheck, VarUsedTwiceInAdd) {
  const Tensor x = rn({2, 3});
  Var xv(x, true);
  Var y = fn::add(xv, xv);
  const Tensor R = rn({2, 3});
  backward(y, R);
  const std::vector<float> g = xv.grad().to_vector(), r = R.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], 2.f * r[i]) << i;
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::add(v[0], v[0]); }, {{"x", x}}));
}

TEST_F(Gradcheck, VarFeedingTwoLinears) {
  EXPECT_TRUE(gradcheck_ok(
      [](const V& v) { return fn::add(fn::linear(v[0], v[1], v[2]), fn::gelu(fn::linear(v[0], v[3], Var()))); },
      {{"x", rn({2, 3, 4})}, {"w1", rn({5, 4})}, {"b1", rn({5})}, {"w2", rn({5, 4})}}));
}

TEST_F(Gradcheck, VarUsedAsBothMatmulOperands) {
  EXPECT_TRUE(gradcheck_ok([](const V& v) { return fn::matmul(v[0], v[0], true); }, {{"a", rn({2, 3, 4})}}));
}

TEST_F(Gradcheck, ResidualBlockWithSharedLayerNormWeights) {
  // x -> layernorm -> linear -> relu -> linear -> + x -> layernorm (same weights) -> cross-entropy.
  const Tensor targets = Tensor::from_ids({4}, {1, 0, 3, 2});
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) {
        Var h = fn::layernorm(v[0], v[1], v[2], 1e-5f);
        h = fn::linear(fn::relu(fn::linear(h, v[3], Var())), v[4], Var());
        Var y = fn::layernorm(fn::add(h, v[0]), v[1], v[2], 1e-5f);
        return fn::cross_entropy(fn::reshape(y, Dims{4, 4}), targets, 0, 0.1f);
      },
      {{"x", rn({2, 2, 4})},
       {"ln_w", rn({4}, 0.3f, 1.f)},
       {"ln_b", rn({4}, 0.3f)},
       {"w1", rn({6, 4})},
       {"w2", rn({4, 6})}}));
}

// Self-attention with q, k and v the same Var (and cross-attention with k == v): each of the
// three gradients must be added into the one shared slot.
// Regression: attention_backward once wrote all three into the shared slot, keeping only dK.
TEST_F(Gradcheck, AttentionWithSharedQKV) {
  ops::AttentionMasks m;
  m.causal = true;
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::attention(v[0], v[0], v[0], m); }, {{"x", rn({1, 2, 3, 4})}}));
}

TEST_F(Gradcheck, AttentionWithSharedKV) {
  ops::AttentionMasks m;
  EXPECT_TRUE(gradcheck_ok([&](const V& v) { return fn::attention(v[0], v[1], v[1], m); },
                           {{"q", rn({1, 2, 2, 3})}, {"mem", rn({1, 2, 4, 3})}}));
}

// The same sharing is fine when the slot already holds a gradient before attention's backward runs
// (then every gradient is accumulated): x also feeds a later op, whose backward runs first.
TEST_F(Gradcheck, AttentionWithSharedQKVWhoseSlotIsAlreadyFilled) {
  ops::AttentionMasks m;
  m.key_keep = mask_rows({{1, 1, 0}});
  EXPECT_TRUE(gradcheck_ok(
      [&](const V& v) {
        Var a = fn::attention(v[0], v[0], v[0], m);  // recorded first, so its backward runs last
        Var b = fn::scale(v[0], 0.5f);
        return fn::add(a, b);
      },
      {{"x", rn({1, 2, 3, 4})}}));
}

}  // namespace
}  // namespace qkv::test
