// The fused fn::attention against its definition composed from separate ops:
//   fn::matmul(q, k, transpose_b) -> fn::scale(1/sqrt(dk)) -> fn::masked_fill -> fn::softmax
//   [-> fn::dropout] -> fn::matmul(., v)
// in values and in the gradients of q, k and v.
//
// Not bit-identical, by design: the fused kernel (like the seed, scores / math.sqrt(d_k)) divides
// the scores by sqrt(dk), while the composition multiplies by the float 1/sqrt(dk); the two differ
// by up to an ulp per score, and exp() turns an absolute score error e into a relative probability
// error e. The GEMMs also run on other shapes (per head in the kernel, batched here) and so sum in
// other orders. The tolerance is therefore a few ulps of the tensor's scale rather than equality:
//   |fused - composed| <= kUlps * u * (|composed| + max|composed|),   u = 2^-24, kUlps = 16
// (an ulp-level difference in a score of size |s| ~ 3 is ~3 ulps of the probability, then summed
// over Tk terms in P V and again in the backward GEMMs). Observed: at most 3.5 ulps, and 0 whenever
// dk is a power of 4 (then 1/sqrt(dk) is exact and both paths round alike); QKV_TEST_VERBOSE=1 prints them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>

#include "ops/gradcheck.h"
#include "qkv/autograd/functions.h"
#include "qkv/autograd/graph.h"
#include "qkv/ops/precision.h"

namespace qkv::test {
namespace {

constexpr double kUlps = 16;

struct FusedCase {
  const char* name;
  int64_t B, H, Tq, Tk, dk;
  bool key_mask, query_mask, causal;
  float p = 0.f;       // attention dropout
  bool views = false;  // q, k, v as split_heads views of (B, T, H * dk) tensors
};

ops::AttentionMasks make_masks(const FusedCase& c) {
  ops::AttentionMasks m;
  if (c.key_mask) {  // row b pads its last b keys (b < Tk), so the last batch row has most padding
    std::vector<std::vector<int32_t>> rows(c.B, std::vector<int32_t>(c.Tk, 1));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = std::max<int64_t>(1, c.Tk - b); j < c.Tk; ++j) rows[b][j] = 0;
    m.key_keep = mask_rows(rows);
  }
  if (c.query_mask) {  // the last batch row is fully padded on the query side, row 0 partially
    std::vector<std::vector<int32_t>> rows(c.B, std::vector<int32_t>(c.Tq, 1));
    rows[0][c.Tq - 1] = 0;
    for (auto& x : rows[c.B - 1]) x = 0;
    m.query_keep = mask_rows(rows);
  }
  m.causal = c.causal;
  return m;
}

struct Result {
  Tensor out, dq, dk, dv;
};

class FusedAttention : public ::testing::TestWithParam<FusedCase> {
 protected:
  void SetUp() override { Graph::current().clear(); }
  void TearDown() override { EXPECT_EQ(Graph::current().size(), 0u); }
};

// Builds q, k, v as leaves (or as head views of leaves), runs `attn`, backward with g.
template <class F>
Result run(const FusedCase& c, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g, F attn) {
  Var q(q0.clone(), true), k(k0.clone(), true), v(v0.clone(), true);
  Var out = c.views ? fn::combine_heads(attn(fn::split_heads(q, c.H), fn::split_heads(k, c.H), fn::split_heads(v, c.H)))
                    : attn(q, k, v);
  backward(out, g);
  return {out.value(), q.grad(), k.grad(), v.grad()};
}

::testing::AssertionResult ulp_close(const Tensor& fused, const Tensor& composed, const std::string& what) {
  if (!fused.defined() || !composed.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  float scale = 0;
  for (float x : composed.to_vector()) scale = std::max(scale, std::abs(x));
  const double u = std::ldexp(1.0, -24);
  // closeness() checks |a - b| <= atol + rtol |b| with atol = kUlps u max|b| and rtol = kUlps u.
  Closeness c;
  ::testing::AssertionResult r = all_close(fused, composed, kUlps * u * scale, kUlps * u, what, &c);
  if (verbose())
    std::cout << "[fused] " << current_test_name() << " " << what << ": max abs err " << c.max_abs << " = "
              << (scale > 0 ? c.max_abs / (u * scale) : 0.0) << " ulps of max|x| " << scale << "\n";
  return r;
}

// A case's inputs: q, k, v (or the projections they are heads of) and the output's gradient g.
struct Inputs {
  Tensor q0, k0, v0, g;
};
Inputs make_inputs(const FusedCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Dims qs = c.views ? Dims{c.B, c.Tq, c.H * c.dk} : Dims{c.B, c.H, c.Tq, c.dk};
  const Dims ks = c.views ? Dims{c.B, c.Tk, c.H * c.dk} : Dims{c.B, c.H, c.Tk, c.dk};
  Inputs in;
  in.q0 = randn(qs, rng, 1.5f), in.k0 = randn(ks, rng, 1.5f), in.v0 = randn(ks, rng);
  in.g = randn(qs, rng);
  return in;
}

// The fused op's definition from separate ops, in whatever precision the caller's scope sets.
auto composition(const FusedCase& c, const ops::AttentionMasks& m, const ops::AttentionDropoutSpec& drop) {
  return [&c, &m, &drop](const Var& q, const Var& k, const Var& v) {
    const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.dk)));
    Var p = fn::softmax(fn::masked_fill(fn::scale(fn::matmul(q, k, true), s), m));
    // The kernel's dropout counter for probability (b, h, i, j) is offset + its flat index in the
    // contiguous (B, H, Tq, Tk) tensor: exactly what fn::dropout uses on that tensor.
    return fn::matmul(fn::dropout(p, drop.p, drop.seed, drop.offset), v);
  };
}

TEST_P(FusedAttention, EqualsComposition) {
  const FusedCase c = GetParam();
  const Inputs in = make_inputs(c, 99);
  const ops::AttentionMasks m = make_masks(c);
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};

  const Result fused = run(c, in.q0, in.k0, in.v0, in.g,
                           [&](const Var& q, const Var& k, const Var& v) { return fn::attention(q, k, v, m, drop); });
  const Result composed = run(c, in.q0, in.k0, in.v0, in.g, composition(c, m, drop));
  EXPECT_TRUE(ulp_close(fused.out, composed.out, "out"));
  EXPECT_TRUE(ulp_close(fused.dq, composed.dq, "dq"));
  EXPECT_TRUE(ulp_close(fused.dk, composed.dk, "dk"));
  EXPECT_TRUE(ulp_close(fused.dv, composed.dv, "dv"));
}

// The largest |a - b| over the elements.
double max_abs_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  return worst;
}

// In bf16 precision the fused attention multiplies as autocast's SDPA does, and as the composition
// does through fn::matmul in that precision: Q, K, P (after dropout), V, dO and dS rounded to bf16,
// float32 sums (kernels/attention_products.h). With the softmax kept in float32 (the caller reads
// the weights), the fused op and the bf16 composition are then one arithmetic, up to the float32
// differences described at the top, which only rarely carry a bf16 operand to a neighbouring bf16
// value; the float32 composition differs from both by bf16's roundings (2^-9 of each operand). So
// for the output and every gradient: the fused result is at least 8x closer to the bf16
// composition than to the float32 one, and within a bf16 rounding of it. Every shape of the suite,
// the causal blocks included.
TEST_P(FusedAttention, InBf16PrecisionMultipliesAsTheCompositionInBf16) {
  const FusedCase c = GetParam();
  const Inputs in = make_inputs(c, 98);
  const ops::AttentionMasks m = make_masks(c);
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};
  const auto composed = composition(c, m, drop);
  const Result in_f32 = run(c, in.q0, in.k0, in.v0, in.g, composed);
  Result fused, in_bf16;
  {
    const ops::ProductPrecisionScope bf16(ops::Precision::BF16);
    Tensor weights;
    fused = run(c, in.q0, in.k0, in.v0, in.g,
                [&](const Var& q, const Var& k, const Var& v) { return fn::attention(q, k, v, m, drop, &weights); });
    in_bf16 = run(c, in.q0, in.k0, in.v0, in.g, composed);
  }
  const auto check = [&](const Tensor& ours, const Tensor& bf16, const Tensor& f32, const char* what) {
    float scale = 0;
    for (float x : f32.to_vector()) scale = std::max(scale, std::abs(x));
    const double to_bf16 = max_abs_difference(ours, bf16), to_f32 = max_abs_difference(ours, f32);
    if (verbose())
      std::cout << "[fused bf16] " << c.name << " " << what << ": from the bf16 composition " << to_bf16
                << ", from the float32 one " << to_f32 << " (max|x| " << scale << ")\n";
    EXPECT_LE(to_bf16, std::ldexp(1.0, -8) * scale) << c.name << " " << what;
    EXPECT_LE(8 * to_bf16, to_f32) << c.name << " " << what << ": the products did not run in bf16";
  };
  check(fused.out, in_bf16.out, in_f32.out, "out");
  check(fused.dq, in_bf16.dq, in_f32.dq, "dq");
  check(fused.dk, in_bf16.dk, in_f32.dk, "dk");
  check(fused.dv, in_bf16.dv, in_f32.dv, "dv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttention,
                         ::testing::Values(
                             // name, B, H, Tq, Tk, dk, key mask, query mask, causal[, dropout p[, views]]
                             FusedCase{"plain", 2, 2, 5, 5, 4, false, false, false},
                             FusedCase{"b1_t1", 1, 1, 1, 1, 4, false, false, false},
                             FusedCase{"b1_t1_causal", 1, 2, 1, 1, 3, false, false, true},
                             FusedCase{"key_pad_odd", 3, 3, 7, 7, 5, true, false, false},
                             FusedCase{"query_mask_odd", 3, 2, 7, 7, 6, false, true, false},
                             FusedCase{"causal_odd", 3, 1, 7, 7, 5, false, false, true},
                             FusedCase{"target_mask", 3, 2, 7, 7, 4, true, true, true},
                             FusedCase{"cross", 3, 2, 5, 7, 6, true, false, false},
                             FusedCase{"cross_causal", 2, 2, 3, 6, 4, true, true, true},
                             FusedCase{"cross_tq_gt_tk", 2, 1, 6, 3, 4, true, false, true},
                             FusedCase{"dropout", 3, 2, 7, 7, 4, true, false, true, 0.3f},
                             FusedCase{"views_target_mask", 3, 3, 7, 7, 4, false, true, true, 0.f, true},
                             FusedCase{"views_cross_dropout", 2, 2, 4, 7, 6, true, false, false, 0.2f, true},
                             FusedCase{"large_dk", 2, 2, 9, 9, 64, true, true, true},
                             // Long enough for causal self-attention in blocks of queries
                             // (kernels/attention_causal.h), with padded keys, dropout, head views
                             // and dropped queries (which weigh every key).
                             FusedCase{"causal_blocks", 2, 2, 100, 100, 64, true, false, true},
                             FusedCase{"causal_blocks_dropout_views", 2, 2, 130, 130, 64, true, false, true, 0.2f,
                                       true},
                             FusedCase{"causal_blocks_query_mask", 3, 1, 97, 97, 16, true, true, true},
                             FusedCase{"causal_blocks_query_mask_dropout", 3, 2, 110, 110, 64, true, true, true,
                                       0.25f}),
                         [](const ::testing::TestParamInfo<FusedCase>& i) { return std::string(i.param.name); });

// fn::multi_head_attention on (B, T, D) projections is the views path above with the copies taken
// out: combine_heads(attention(split_heads(q), split_heads(k), split_heads(v))) bit for bit, in the
// output and in every gradient, for each shape above (masks, dropout, cross-attention, T = 1).
struct Bits {
  std::vector<float> out, dq, dk, dv;
};

template <class F>
Bits run_on_projections(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g, F attn) {
  Var q(q0.clone(), true), k(k0.clone(), true), v(v0.clone(), true);
  Var out = attn(q, k, v);
  backward(out, g);
  return {out.value().to_vector(), q.grad().to_vector(), k.grad().to_vector(), v.grad().to_vector()};
}

TEST_P(FusedAttention, MultiHeadOnProjectionsGivesTheBitsOfSplitAttendCombine) {
  const FusedCase c = GetParam();
  std::mt19937_64 rng(7);
  const Tensor q0 = randn({c.B, c.Tq, c.H * c.dk}, rng, 1.5f), k0 = randn({c.B, c.Tk, c.H * c.dk}, rng, 1.5f);
  const Tensor v0 = randn({c.B, c.Tk, c.H * c.dk}, rng), g = randn({c.B, c.Tq, c.H * c.dk}, rng);
  const ops::AttentionMasks m = make_masks(c);
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};
  const Bits fused = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::multi_head_attention(q, k, v, c.H, m, drop);
  });
  const Bits composed = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::combine_heads(
        fn::attention(fn::split_heads(q, c.H), fn::split_heads(k, c.H), fn::split_heads(v, c.H), m, drop));
  });
  EXPECT_EQ(fused.out, composed.out);
  EXPECT_EQ(fused.dq, composed.dq);
  EXPECT_EQ(fused.dk, composed.dk);
  EXPECT_EQ(fused.dv, composed.dv);
}

// Self-attention on one projection (q = k = v, their slots alias) and with the slot already holding
// a gradient (every gradient then accumulated): the same bits as the composition.
TEST_F(FusedAttention, MultiHeadWithSharedAndPrefilledSlotsGivesTheBitsOfTheComposition) {
  std::mt19937_64 rng(11);
  const Tensor x0 = randn({2, 5, 12}, rng, 1.5f), g = randn({2, 5, 12}, rng);
  ops::AttentionMasks m;
  m.causal = true;
  m.key_keep = mask_rows({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}});
  const auto grads = [&](auto attn) {
    Var x(x0.clone(), true);
    Var out = fn::add(attn(x), fn::scale(x, 0.5f));  // x's slot is filled before attention's backward
    backward(out, g);
    return std::pair{out.value().to_vector(), x.grad().to_vector()};
  };
  const auto fused = grads([&](const Var& x) { return fn::multi_head_attention(x, x, x, 3, m); });
  const auto composed = grads([&](const Var& x) {
    const Var h = fn::split_heads(x, 3);
    return fn::combine_heads(fn::attention(h, h, h, m));
  });
  EXPECT_EQ(fused.first, composed.first);
  EXPECT_EQ(fused.second, composed.second);
}

// ---- T5: unscaled scores plus a position bias (Tq, Tk, H) shared by the batch rows ----------------

// The bias as every batch row's (B, H, Tq, Tk) addend, for the composition.
Tensor bias_of_every_row(const Tensor& bias, int64_t B) {
  const int64_t Tq = bias.size(0), Tk = bias.size(1), H = bias.size(2);
  const std::vector<float> src = bias.to_vector();
  std::vector<float> out(static_cast<size_t>(B * H * Tq * Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ij = 0; ij < Tq * Tk; ++ij) out[static_cast<size_t>((b * H + h) * Tq * Tk + ij)] = src[ij * H + h];
  return Tensor::from_vector(Dims{B, H, Tq, Tk}, out);
}

// The gradient of bias_of_every_row's result summed over the batch rows (in order), laid out (Tq, Tk, H).
Tensor summed_over_rows(const Tensor& g) {
  const int64_t B = g.size(0), H = g.size(1), Tq = g.size(2), Tk = g.size(3);
  const std::vector<float> src = g.to_vector();
  std::vector<float> out(static_cast<size_t>(Tq * Tk * H), 0.f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ij = 0; ij < Tq * Tk; ++ij) out[ij * H + h] += src[static_cast<size_t>((b * H + h) * Tq * Tk + ij)];
  return Tensor::from_vector(Dims{Tq, Tk, H}, out);
}

// q and k whose unscaled scores are of size O(1), as T5's initialisation makes them.
float t5_scale(int64_t dk) { return static_cast<float>(std::pow(static_cast<double>(dk), -0.25)); }

// The fused op with a position bias and no scaling against matmul -> add(bias) -> masked_fill ->
// softmax [-> dropout] -> matmul, in values and in the gradients of q, k, v and the bias.
TEST_P(FusedAttention, WithPositionBiasUnscaledEqualsComposition) {
  const FusedCase c = GetParam();
  std::mt19937_64 rng(31);
  const Dims qs = c.views ? Dims{c.B, c.Tq, c.H * c.dk} : Dims{c.B, c.H, c.Tq, c.dk};
  const Dims ks = c.views ? Dims{c.B, c.Tk, c.H * c.dk} : Dims{c.B, c.H, c.Tk, c.dk};
  const Tensor q0 = randn(qs, rng, t5_scale(c.dk)), k0 = randn(ks, rng, t5_scale(c.dk)), v0 = randn(ks, rng);
  const Tensor bias0 = randn({c.Tq, c.Tk, c.H}, rng), g = randn(qs, rng);
  ops::AttentionMasks m = make_masks(c);
  m.scale_scores = false;
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};

  Var bias(bias0.clone(), true);
  const Result fused = run(c, q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::attention(q, k, v, m, drop, nullptr, bias);
  });
  Var every_row(bias_of_every_row(bias0, c.B), true);
  const Result composed = run(c, q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    Var p = fn::softmax(fn::masked_fill(fn::add(fn::matmul(q, k, true), every_row), make_masks(c)));
    return fn::matmul(fn::dropout(p, drop.p, drop.seed, drop.offset), v);
  });
  EXPECT_TRUE(ulp_close(fused.out, composed.out, "out"));
  EXPECT_TRUE(ulp_close(fused.dq, composed.dq, "dq"));
  EXPECT_TRUE(ulp_close(fused.dk, composed.dk, "dk"));
  EXPECT_TRUE(ulp_close(fused.dv, composed.dv, "dv"));
  EXPECT_TRUE(ulp_close(bias.grad(), summed_over_rows(every_row.grad()), "dbias"));
}

// A bias of zeros changes no bit of the output or of dq, dk, dv (the backward that also writes the
// bias's gradient folds the scale in as the one without does).
TEST_P(FusedAttention, ZeroPositionBiasGivesTheBitsOfNone) {
  const FusedCase c = GetParam();
  std::mt19937_64 rng(5);
  const Tensor q0 = randn({c.B, c.Tq, c.H * c.dk}, rng, 1.5f), k0 = randn({c.B, c.Tk, c.H * c.dk}, rng, 1.5f);
  const Tensor v0 = randn({c.B, c.Tk, c.H * c.dk}, rng), g = randn({c.B, c.Tq, c.H * c.dk}, rng);
  const ops::AttentionMasks m = make_masks(c);
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};
  const Tensor zeros = Tensor::from_vector({c.Tq, c.Tk, c.H}, std::vector<float>(c.Tq * c.Tk * c.H, 0.f));
  const Bits none = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::multi_head_attention(q, k, v, c.H, m, drop);
  });
  const Bits zero = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::multi_head_attention(q, k, v, c.H, m, drop, nullptr, Var(zeros.clone(), true));
  });
  EXPECT_EQ(none.out, zero.out);
  EXPECT_EQ(none.dq, zero.dq);
  EXPECT_EQ(none.dk, zero.dk);
  EXPECT_EQ(none.dv, zero.dv);
}

// With a bias, multi-head attention on projections still gives the bits of split, attend, combine,
// the bias's gradient included.
TEST_P(FusedAttention, MultiHeadWithPositionBiasGivesTheBitsOfSplitAttendCombine) {
  const FusedCase c = GetParam();
  std::mt19937_64 rng(8);
  const Tensor q0 = randn({c.B, c.Tq, c.H * c.dk}, rng), k0 = randn({c.B, c.Tk, c.H * c.dk}, rng);
  const Tensor v0 = randn({c.B, c.Tk, c.H * c.dk}, rng), g = randn({c.B, c.Tq, c.H * c.dk}, rng);
  const Tensor bias0 = randn({c.Tq, c.Tk, c.H}, rng);
  ops::AttentionMasks m = make_masks(c);
  m.scale_scores = false;
  const ops::AttentionDropoutSpec drop{c.p, 2024, 17};
  Var fused_bias(bias0.clone(), true), composed_bias(bias0.clone(), true);
  const Bits fused = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::multi_head_attention(q, k, v, c.H, m, drop, nullptr, fused_bias);
  });
  const Bits composed = run_on_projections(q0, k0, v0, g, [&](const Var& q, const Var& k, const Var& v) {
    return fn::combine_heads(fn::attention(fn::split_heads(q, c.H), fn::split_heads(k, c.H), fn::split_heads(v, c.H),
                                           m, drop, nullptr, composed_bias));
  });
  EXPECT_EQ(fused.out, composed.out);
  EXPECT_EQ(fused.dq, composed.dq);
  EXPECT_EQ(fused.dk, composed.dk);
  EXPECT_EQ(fused.dv, composed.dv);
  EXPECT_EQ(fused_bias.grad().to_vector(), composed_bias.grad().to_vector());
}

struct InferenceShape {
  int64_t B, H, Tq, Tk, dk;
};

// Inference's paths (a dot product per key for at most 8 queries or at most 128 keys, where the
// register tiles would take heads without a bias; BLAS past that) against training's BLAS path,
// with a bias and unscaled; and the tiles themselves, unscaled without a bias.
TEST_F(FusedAttention, InferencePathsWithPositionBiasMatchTraining) {
  std::mt19937_64 rng(17);
  for (const InferenceShape s : {InferenceShape{2, 3, 1, 11, 64}, InferenceShape{2, 3, 3, 11, 32},
                                 InferenceShape{2, 2, 5, 9, 5}, InferenceShape{2, 3, 20, 20, 16},
                                 InferenceShape{2, 2, 12, 40, 64}, InferenceShape{1, 2, 10, 130, 8}}) {
    const Tensor q = randn({s.B, s.H, s.Tq, s.dk}, rng, t5_scale(s.dk));
    const Tensor k = randn({s.B, s.H, s.Tk, s.dk}, rng, t5_scale(s.dk)), v = randn({s.B, s.H, s.Tk, s.dk}, rng);
    std::vector<std::vector<int32_t>> keep(s.B, std::vector<int32_t>(s.Tk, 1));
    keep[s.B - 1][s.Tk - 1] = keep[s.B - 1][s.Tk / 2] = 0;
    for (const bool with_bias : {true, false}) {
      ops::AttentionMasks m;
      m.key_keep = mask_rows(keep);
      m.causal = true;
      m.scale_scores = false;
      if (with_bias) m.bias = randn({s.Tq, s.Tk, s.H}, rng);
      const std::string what = "Tq " + std::to_string(s.Tq) + " Tk " + std::to_string(s.Tk) + " dk " +
                               std::to_string(s.dk) + (with_bias ? " with bias" : " unscaled only");
      Tensor train_probs, probs;
      const Tensor train = ops::attention_forward(q, k, v, m, {}, &train_probs, false);
      EXPECT_TRUE(all_close(ops::attention_forward(q, k, v, m, {}, &probs, true), train, 1e-6, 1e-6, what + " out"));
      EXPECT_TRUE(all_close(probs, train_probs, 1e-6, 1e-6, what + " probs"));
      EXPECT_TRUE(all_close(ops::attention_forward(q, k, v, m, {}, nullptr, true), train, 1e-6, 1e-6,
                            what + " out without probs"));
    }
  }
}

// The beam-search cache read through a map of rows, with a bias for the step's queries (Tq, Tk, H),
// against training's path on the rows gathered into place.
TEST_F(FusedAttention, MappedCacheWithPositionBiasMatchesTrainingOnGatheredRows) {
  std::mt19937_64 rng(23);
  const int64_t B = 4, Bk = 3, H = 2, Tk = 9;
  for (const int64_t dk : {32, 6})
    for (const int64_t Tq : {1, 3}) {
      const Tensor q = randn({B, H, Tq, dk}, rng, t5_scale(dk));
      const Tensor k = randn({Bk, H, Tk, dk}, rng, t5_scale(dk)), v = randn({Bk, H, Tk, dk}, rng);
      std::vector<int32_t> rows(static_cast<size_t>(B * Tk));
      for (size_t n = 0; n < rows.size(); ++n) rows[n] = static_cast<int32_t>(rng() % Bk);
      const std::vector<float> kf = k.to_vector(), vf = v.to_vector();
      std::vector<float> kg(static_cast<size_t>(B * H * Tk * dk)), vg(kg.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < Tk; ++j)
            for (int64_t c = 0; c < dk; ++c) {
              const size_t to = static_cast<size_t>(((b * H + h) * Tk + j) * dk + c);
              const size_t from = static_cast<size_t>(((rows[b * Tk + j] * H + h) * Tk + j) * dk + c);
              kg[to] = kf[from];
              vg[to] = vf[from];
            }
      ops::AttentionMasks m;
      m.key_keep = mask_rows({{1, 1, 1, 1, 1, 1, 1, 1, 1},
                              {1, 1, 1, 1, 1, 1, 0, 0, 0},
                              {0, 1, 1, 1, 1, 1, 1, 1, 1},
                              {1, 1, 1, 1, 1, 1, 1, 1, 1}});
      m.causal = true;
      m.scale_scores = false;
      m.bias = randn({Tq, Tk, H}, rng);
      const std::string what = "dk " + std::to_string(dk) + " Tq " + std::to_string(Tq);
      Tensor probs, train_probs;
      const Tensor mapped = ops::attention_forward_mapped(q, k, v, Tensor::from_ids({B, Tk}, rows), m, &probs);
      const Tensor train = ops::attention_forward(q, Tensor::from_vector({B, H, Tk, dk}, kg),
                                                  Tensor::from_vector({B, H, Tk, dk}, vg), m, {}, &train_probs, false);
      EXPECT_TRUE(all_close(mapped, train, 1e-6, 1e-6, what + " out"));
      EXPECT_TRUE(all_close(probs, train_probs, 1e-6, 1e-6, what + " probs"));
    }
}

TEST_F(FusedAttention, PositionBiasOfTheWrongShapeThrows) {
  std::mt19937_64 rng(3);
  const Tensor q = randn({2, 3, 4, 8}, rng), k = randn({2, 3, 5, 8}, rng);
  ops::AttentionMasks m;
  m.bias = randn({4, 5, 2}, rng);  // H = 2, not 3
  try {
    ops::attention_forward(q, k, k, m, {}, nullptr, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(Tq, Tk, H) = (4, 5, 3)"), std::string::npos) << e.what();
  }
  m.bias = randn({5, 4, 3}, rng).transpose(0, 1);  // the right shape, not contiguous
  EXPECT_THROW(ops::attention_forward(q, k, k, m, {}, nullptr, true), Error);
}

}  // namespace
}  // namespace qkv::test
