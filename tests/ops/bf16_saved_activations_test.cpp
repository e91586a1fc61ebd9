// What bf16 precision keeps for the backward, at half the memory of float32 (ops/precision.h):
//
// - A linear layer's input that nothing else keeps (fn::InputUse::LastUse), rounded to bf16. The
//   weight gradient's bf16 product rounds that input to bf16 anyway, and widening is exact, so the
//   gradients are the very bits of keeping it in float32. Float32 precision keeps it as it is.
// - The fused attention's softmax, rounded to bf16: its backward then equals the backward given
//   that rounded softmax widened to float32 (its products round P to bf16 anyway), bit for bit. The
//   forward is the same as with the softmax kept in float32, as a caller that reads the weights
//   gets it, and float32 precision keeps float32.
#include <gtest/gtest.h>

#include <random>

#include "ops/gradcheck.h"
#include "qkv/autograd/functions.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/autograd/graph.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"

namespace qkv {
namespace {

using test::randn;

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  if (x.size() != y.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < x.size(); ++i)
    if (float_bits(x[i]) != float_bits(y[i]))
      return ::testing::AssertionFailure() << what << " differs at " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

struct LinearGrads {
  Tensor y, dx, dw, db;
};

LinearGrads linear_grads(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, fn::InputUse use) {
  Var x(x0.clone(), true), w(w0.clone(), true), b(b0.clone(), true);
  Var y = fn::linear(x, w, b, use);
  backward(y, g);
  return {y.value(), x.grad(), w.grad(), b.grad()};
}

TEST(Bf16SavedActivations, ALinearsLastUsedInputKeptInBf16GivesTheSameGradientBits) {
  std::mt19937_64 rng(3);
  // Rows and columns off the kernels' tiles; inputs of mixed magnitude so the roundings matter.
  const Tensor x = randn({3, 7, 45}, rng, 3.f), w = randn({29, 45}, rng, 0.2f), b = randn({29}, rng);
  const Tensor g = randn({3, 7, 29}, rng);
  for (const ops::Precision p : {ops::Precision::BF16, ops::Precision::Float32}) {
    const ops::ProductPrecisionScope scope(p);
    const LinearGrads shared = linear_grads(x, w, b, g, fn::InputUse::Shared);
    const LinearGrads last = linear_grads(x, w, b, g, fn::InputUse::LastUse);
    const std::string what = ops::precision_name(p);
    EXPECT_TRUE(same_bits(last.y, shared.y, what + " y"));
    EXPECT_TRUE(same_bits(last.dx, shared.dx, what + " dx"));
    EXPECT_TRUE(same_bits(last.dw, shared.dw, what + " dw"));
    EXPECT_TRUE(same_bits(last.db, shared.db, what + " db"));
  }
}

TEST(Bf16SavedActivations, OnlyBf16PrecisionKeepsALinearInputInBf16) {
  std::mt19937_64 rng(5);
  const Tensor x = randn({4, 16}, rng);
  const Tensor kept = ops::saved_for_backward(x, ops::Precision::BF16);
  EXPECT_EQ(kept.dtype(), DType::BF16);
  EXPECT_EQ(kept.shape(), x.shape());
  EXPECT_TRUE(same_bits(kept, x.to(DType::BF16), "the rounding"));
  EXPECT_EQ(ops::saved_for_backward(x, ops::Precision::Float32).data<float>(), x.data<float>());  // x itself
}

// The activations' backward from a bf16 input (widened a chunk of 65,536 at a time) = the float32
// kernel that bf16 precision runs (GELU's: its float-step forms, kernels/gelu_lanes.h) at the rounded
// input, across chunk boundaries; accumulating adds to what dx held.
TEST(Bf16SavedActivations, ActivationBackwardsReadABf16InputAsItsRoundedValues) {
  std::mt19937_64 rng(9);
  const int64_t n = 65536 * 2 + 77;
  const Tensor x = randn({n}, rng, 3.f), dy = randn({n}, rng), start = randn({n}, rng);
  const Tensor kept = ops::saved_for_backward(x, ops::Precision::BF16);
  ASSERT_EQ(kept.dtype(), DType::BF16);
  const Tensor rounded = kept.to(DType::F32);
  using Backward = void (*)(const Tensor&, const Tensor&, Tensor*);
  struct Activation {
    const char* name;
    Backward backward;
    kernels::ActivationBackward kernel_for_bf16_input;
  };
  for (const Activation& a : {Activation{"gelu", ops::gelu_backward, kernels::gelu_backward_for_bf16},
                              Activation{"gelu_tanh", ops::gelu_tanh_backward, kernels::gelu_tanh_backward_for_bf16},
                              Activation{"silu", ops::silu_backward, kernels::silu_backward}}) {
    const std::string name = a.name;
    for (bool accumulate : {false, true}) {
      Tensor from_bf16 = accumulate ? start.clone() : Tensor();
      a.backward(dy, kept, &from_bf16);
      Tensor expected = start.clone();
      a.kernel_for_bf16_input(expected.f32(), dy.f32(), rounded.f32(), n, accumulate);
      EXPECT_TRUE(same_bits(from_bf16, expected, name + (accumulate ? " accumulated" : " written")));
    }
    Tensor exact;
    a.backward(dy, x, &exact);
    Tensor from_bf16;
    a.backward(dy, kept, &from_bf16);
    EXPECT_FALSE(same_bits(from_bf16, exact, name + " against the unrounded input"));
  }
}

// In bf16 precision (on the CPU) GELU and GELU-tanh run their float-step forms; in float32 the
// kernels good to a few ulps.
TEST(Bf16SavedActivations, Bf16PrecisionRunsGelusFloatStepForms) {
  std::mt19937_64 rng(13);
  const int64_t n = 4099;
  const Tensor x = randn({n}, rng, 3.f);
  using Forward = Tensor (*)(const Tensor&);
  using Kernel = void (*)(float*, const float*, int64_t);
  struct Form {
    const char* name;
    Forward op;
    Kernel exact, for_bf16;
  };
  for (const Form& f : {Form{"gelu", ops::gelu_forward, kernels::gelu_forward, kernels::gelu_forward_to_quantize},
                        Form{"gelu_tanh", ops::gelu_tanh_forward, kernels::gelu_tanh_forward,
                             kernels::gelu_tanh_forward_for_bf16}}) {
    Tensor exact = x.clone(), for_bf16 = x.clone();
    f.exact(exact.f32(), x.f32(), n);
    f.for_bf16(for_bf16.f32(), x.f32(), n);
    EXPECT_FALSE(same_bits(exact, for_bf16, std::string(f.name) + ": the two forms"));
    EXPECT_TRUE(same_bits(f.op(x), exact, std::string(f.name) + " in float32 precision"));
    const ops::ProductPrecisionScope bf16(ops::Precision::BF16);
    EXPECT_TRUE(same_bits(f.op(x), for_bf16, std::string(f.name) + " in bf16 precision"));
  }
}

struct AttentionCase {
  int64_t B, H, Tq, Tk, dk;
  bool causal;
  float dropout;
};

TEST(Bf16SavedActivations, AttentionKeepsTheSoftmaxInBf16AndItsBackwardReadsItSo) {
  std::mt19937_64 rng(7);
  for (const AttentionCase c : {AttentionCase{2, 3, 5, 5, 8, true, 0.f}, AttentionCase{1, 2, 17, 9, 16, false, 0.f},
                                AttentionCase{2, 2, 12, 12, 8, true, 0.25f}}) {
    const Tensor q = randn({c.B, c.H, c.Tq, c.dk}, rng, 2.f), k = randn({c.B, c.H, c.Tk, c.dk}, rng, 2.f);
    const Tensor v = randn({c.B, c.H, c.Tk, c.dk}, rng), dout = randn({c.B, c.H, c.Tq, c.dk}, rng);
    ops::AttentionMasks masks;
    masks.causal = c.causal;
    const ops::AttentionDropoutSpec drop{c.dropout, 11, 0};
    std::string what = "Tq ";  // (built by appends: GCC 12's -Wrestrict misfires on "B" + std::string)
    what += std::to_string(c.Tq);
    what += c.dropout > 0.f ? " with dropout" : "";

    ops::AttentionSaved bf16_saved, f32_saved, asked;
    Tensor out_bf16, out_asked, out_f32;
    {
      const ops::ProductPrecisionScope bf16(ops::Precision::BF16);
      out_bf16 = ops::attention_forward_saving(q, k, v, masks, drop, &bf16_saved, false);
      out_asked = ops::attention_forward_saving(q, k, v, masks, drop, &asked, true);
    }
    out_f32 = ops::attention_forward_saving(q, k, v, masks, drop, &f32_saved, false);
    ASSERT_EQ(bf16_saved.probs.dtype(), DType::BF16) << what;
    EXPECT_EQ(asked.probs.dtype(), DType::F32) << what << ": a softmax the caller reads stays float32";
    EXPECT_EQ(f32_saved.probs.dtype(), DType::F32) << what;
    EXPECT_TRUE(bf16_saved.bf16 && asked.bf16 && !f32_saved.bf16) << what << ": which products ran in bf16";
    EXPECT_TRUE(same_bits(out_bf16, out_asked, what + " output, the softmax kept in bf16 or float32"));
    EXPECT_TRUE(same_bits(bf16_saved.probs, asked.probs.to(DType::BF16), what + " the kept softmax"));
    EXPECT_FALSE(same_bits(out_bf16, out_f32, what + " output against float32 products"));

    // The backward from the bf16 softmax = the backward given the rounded softmax widened.
    Tensor dq, dk, dv, rq, rk, rv;
    ops::attention_backward(dout, q, k, v, bf16_saved, masks, drop, &dq, &dk, &dv);
    ops::AttentionSaved rounded = asked;
    rounded.probs = asked.probs.to(DType::BF16).to(DType::F32);
    ops::attention_backward(dout, q, k, v, rounded, masks, drop, &rq, &rk, &rv);
    EXPECT_TRUE(same_bits(dq, rq, what + " dq"));
    EXPECT_TRUE(same_bits(dk, rk, what + " dk"));
    EXPECT_TRUE(same_bits(dv, rv, what + " dv"));
    // And the rounding ran: the float32 softmax gives other gradients in the same products.
    Tensor fq, fk, fv;
    ops::attention_backward(dout, q, k, v, asked, masks, drop, &fq, &fk, &fv);
    EXPECT_FALSE(same_bits(dq, fq, what + " dq against the float32 softmax"));
  }
}

}  // namespace
}  // namespace qkv
