// Bad input gives a clear qkv::Error (naming the op and the offending shapes / ids / sizes), and
// dropout's statistics and reproducibility.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/gradcheck.h"
#include "qkv/autograd/functions.h"
#include "qkv/autograd/graph.h"
#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

namespace qkv::test {
namespace {

// Runs f, expects a qkv::Error whose message contains every fragment.
::testing::AssertionResult throws_with(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& frag : fragments)
      if (msg.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << frag << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-qkv::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

Var leaf(const Dims& d) { return Var(Tensor::zeros(d), false); }

class OpErrors : public ::testing::Test {
 protected:
  void SetUp() override { Graph::current().clear(); }
  // A failed op must not leave a node on the tape.
  void TearDown() override { EXPECT_EQ(Graph::current().size(), 0u); }
};

TEST_F(OpErrors, LinearShapeMismatchNamesOpAndBothShapes) {
  EXPECT_TRUE(throws_with([] { fn::linear(leaf({2, 3}), leaf({4, 5}), Var()); }, {"linear", "(2, 3)", "(4, 5)"}));
  EXPECT_TRUE(throws_with(
      [] {
        fn::linear(leaf({2, 7, 3}), leaf({4, 5}), leaf({4}));
      },
      {"linear", "(2, 7, 3)", "(4, 5)"}));
  EXPECT_TRUE(throws_with([] { fn::linear(leaf({2, 5}), leaf({4, 5}), leaf({3})); }, {"linear", "(3)", "(4, 5)"}));
  // Requiring grad does not change the check (and records nothing).
  EXPECT_TRUE(throws_with(
      [] {
        fn::linear(Var(Tensor::zeros({2, 3}), true), Var(Tensor::zeros({4, 5}), true), Var());
      },
      {"linear", "(2, 3)", "(4, 5)"}));
}

TEST_F(OpErrors, AddShapeMismatchNamesOpAndBothShapes) {
  EXPECT_TRUE(throws_with([] { fn::add(leaf({2, 3}), leaf({3, 2})); }, {"add", "(2, 3)", "(3, 2)"}));
  EXPECT_TRUE(throws_with([] { fn::add(leaf({1, 7, 12}), leaf({1, 7, 11})); }, {"add", "(1, 7, 12)", "(1, 7, 11)"}));
}

TEST_F(OpErrors, MatmulShapeMismatchNamesOpAndBothShapes) {
  EXPECT_TRUE(throws_with([] { fn::matmul(leaf({2, 3}), leaf({4, 5})); }, {"matmul", "(2, 3)", "(4, 5)"}));
  EXPECT_TRUE(throws_with([] { fn::matmul(leaf({2, 3}), leaf({4, 5}), true); }, {"matmul", "(2, 3)", "(4, 5)"}));
  EXPECT_TRUE(throws_with([] { fn::matmul(leaf({2, 3, 4}), leaf({3, 4, 5})); }, {"matmul", "(2, 3, 4)", "(3, 4, 5)"}));
  EXPECT_TRUE(throws_with([] { fn::matmul(leaf({3, 4}), leaf({2, 4, 5})); }, {"matmul", "(3, 4)", "(2, 4, 5)"}));
}

TEST_F(OpErrors, MappedAttentionRefusesRowsOutsideTheCacheAndLongQueries) {
  Tensor probs;
  const auto rows_of = [](std::vector<int32_t> r, int64_t B, int64_t Tk) {
    Tensor t = Tensor::empty(Dims{B, Tk}, DType::I32);
    std::copy(r.begin(), r.end(), t.i32());
    return t;
  };
  const Tensor k = leaf({3, 2, 2, 4}).value();  // 3 cache rows, 2 positions
  const auto attend = [&](const Dims& q, const Tensor& rows) {
    return ops::attention_forward_mapped(leaf(q).value(), k, k, rows, {}, &probs);
  };
  EXPECT_TRUE(throws_with([&] { attend({2, 2, 1, 4}, rows_of({0, 1, 2, 3}, 2, 2)); },
                          {"mapped attention", "key 1 of row 1 is in row 3", "[0, 3)"}));
  EXPECT_TRUE(throws_with([&] { attend({2, 2, 9, 4}, rows_of({0, 1, 2, 0}, 2, 2)); }, {"mapped attention", "9 queries"}));
  EXPECT_TRUE(throws_with([&] { attend({2, 2, 1, 4}, rows_of({0, 1, 2}, 1, 3)); }, {"mapped attention", "(2, 2)"}));
  const Tensor out = attend({2, 2, 1, 4}, rows_of({2, 0, 1, 1}, 2, 2));
  EXPECT_EQ(out.shape(), (Dims{2, 2, 1, 4}));
}

// Only inference may skip the softmax: a training forward needs it for its backward.
TEST_F(OpErrors, AttentionWithoutProbsIsRefusedInTraining) {
  const Tensor q = leaf({1, 2, 3, 4}).value();
  EXPECT_TRUE(throws_with([&] { ops::attention_forward(q, q, q, {}, {}, nullptr, /*inference=*/false); },
                          {"attention", "training needs the softmax"}));
  EXPECT_EQ(ops::attention_forward(q, q, q, {}, {}, nullptr, /*inference=*/true).shape(), (Dims{1, 2, 3, 4}));
}

TEST_F(OpErrors, AttentionShapeMismatchNamesOpAndBothShapes) {
  const ops::AttentionMasks none;
  // dk differs between q and k.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({2, 2, 3, 4}), leaf({2, 2, 3, 5}), leaf({2, 2, 3, 5}), none);
      },
      {"attention", "(2, 2, 3, 4)", "(2, 2, 3, 5)"}));
  // k and v differ.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({2, 2, 3, 4}), leaf({2, 2, 5, 4}), leaf({2, 2, 6, 4}), none);
      },
      {"attention", "(2, 2, 5, 4)", "(2, 2, 6, 4)"}));
  // batch differs.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({3, 2, 3, 4}), leaf({2, 2, 3, 4}), leaf({2, 2, 3, 4}), none);
      },
      {"attention", "(3, 2, 3, 4)", "(2, 2, 3, 4)"}));
  // wrong rank.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({2, 3, 4}), leaf({2, 3, 4}), leaf({2, 3, 4}), none);
      },
      {"attention", "(2, 3, 4)"}));
  // multi-head attention on projections: (B, T, D) inputs, D divisible by the heads.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::multi_head_attention(leaf({2, 2, 3, 4}), leaf({2, 3, 4}), leaf({2, 3, 4}), 2, none);
      },
      {"multi-head attention", "q", "(2, 2, 3, 4)"}));
  EXPECT_TRUE(throws_with(
      [&] {
        fn::multi_head_attention(leaf({2, 3, 6}), leaf({2, 3, 6}), leaf({2, 3, 6}), 4, none);
      },
      {"6", "4"}));
  EXPECT_TRUE(throws_with(
      [&] {
        fn::multi_head_attention(leaf({2, 3, 4}), leaf({2, 5, 4}), leaf({2, 6, 4}), 2, none);
      },
      {"attention", "differ"}));
  // masks of the wrong shape name the mask and the expected (B, T).
  ops::AttentionMasks bad_key;
  bad_key.key_keep = Tensor::from_ids({2, 4}, std::vector<int32_t>(8, 1));
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({2, 1, 3, 4}), leaf({2, 1, 5, 4}), leaf({2, 1, 5, 4}), bad_key);
      },
      {"attention", "key mask", "(2, 4)", "(2, 5)"}));
  ops::AttentionMasks bad_query;
  bad_query.query_keep = Tensor::from_ids({2, 5}, std::vector<int32_t>(10, 1));
  EXPECT_TRUE(throws_with(
      [&] {
        fn::attention(leaf({2, 1, 3, 4}), leaf({2, 1, 5, 4}), leaf({2, 1, 5, 4}), bad_query);
      },
      {"attention", "query mask", "(2, 5)", "(2, 3)"}));
}

TEST_F(OpErrors, LayerNormShapeMismatchNamesOpAndBothShapes) {
  EXPECT_TRUE(throws_with(
      [] {
        fn::layernorm(leaf({2, 3}), leaf({4}), leaf({3}), 1e-5f);
      },
      {"layernorm", "(2, 3)", "(4)"}));
  EXPECT_TRUE(throws_with(
      [] {
        fn::layernorm(leaf({2, 7, 12}), leaf({12}), leaf({6}), 1e-5f);
      },
      {"layernorm", "(2, 7, 12)", "(6)"}));
}

// Seed 003's LayerNorm divides by the unbiased std, undefined for one feature (torch gives NaN).
TEST_F(OpErrors, LayerNormSeed003RefusesWidthOne) {
  EXPECT_TRUE(throws_with(
      [] {
        fn::layernorm(leaf({2, 3, 1}), leaf({1}), leaf({1}), 1e-6f, ops::LayerNormVariant::UnbiasedStd);
      },
      {"layernorm", "seed003", "unbiased std", "(2, 3, 1)", "at least 2"}));
  EXPECT_NO_THROW(fn::layernorm(leaf({2, 3, 1}), leaf({1}), leaf({1}), 1e-5f));  // nn.LayerNorm allows it
  EXPECT_NO_THROW(fn::layernorm(leaf({2, 3, 2}), leaf({2}), leaf({2}), 1e-6f, ops::LayerNormVariant::UnbiasedStd));
}

TEST_F(OpErrors, EmbeddingIdOutOfRangeNamesIdAndVocabularySize) {
  const Var table = leaf({17, 4});
  EXPECT_TRUE(throws_with(
      [&] {
        fn::embedding(table, Tensor::from_ids({1, 3}, {1, 1234, 2}));
      },
      {"embedding", "1234", "17"}));
  EXPECT_TRUE(throws_with([&] { fn::embedding(table, Tensor::from_ids({2}, {-3, 0})); }, {"embedding", "-3", "17"}));
  EXPECT_TRUE(throws_with([&] { fn::embedding(table, Tensor::from_ids({1}, {17})); }, {"embedding", "17"}));
  EXPECT_NO_THROW(fn::embedding(table, Tensor::from_ids({1}, {16})));
}

TEST_F(OpErrors, CrossEntropyTargetOutOfRangeNamesIdAndVocabularySize) {
  const Var logits = leaf({3, 11});
  EXPECT_TRUE(throws_with(
      [&] {
        fn::cross_entropy(logits, Tensor::from_ids({3}, {1, 99, 0}), 0);
      },
      {"cross_entropy", "99", "11"}));
  EXPECT_TRUE(throws_with(
      [&] {
        fn::cross_entropy(logits, Tensor::from_ids({3}, {1, 2, -7}), 0);
      },
      {"cross_entropy", "-7", "11"}));
  // The ignore index itself is accepted even when it is outside [0, V).
  EXPECT_NO_THROW(fn::cross_entropy(logits, Tensor::from_ids({3}, {1, -100, 2}), -100));
  // Targets must match the rows.
  EXPECT_TRUE(throws_with(
      [&] {
        fn::cross_entropy(logits, Tensor::from_ids({2}, {1, 2}), 0);
      },
      {"cross_entropy", "(3, 11)"}));
}

TEST_F(OpErrors, SequenceLongerThanPositionalTableNamesBothLengths) {
  const Tensor table = ops::sinusoidal_table(11, 8);
  EXPECT_TRUE(throws_with([&] { fn::add_positional(leaf({2, 13, 8}), table); }, {"13", "11"}));
  EXPECT_NO_THROW(fn::add_positional(leaf({2, 11, 8}), table));
  EXPECT_TRUE(throws_with([&] { fn::add_positional(leaf({2, 5, 6}), table); }, {"(11, 8)", "(2, 5, 6)"}));
}

TEST_F(OpErrors, DropoutProbabilityOutsideZeroOneIsRefused) {
  const Var x = leaf({4, 4});
  for (float p : {1.f, 1.5f, -0.1f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_TRUE(throws_with([&] { fn::dropout(x, p, 1, 0); }, {"dropout"})) << "p = " << p;
    EXPECT_TRUE(throws_with([&] { ops::dropout_forward(x.value(), p, 1, 0); }, {"dropout"})) << "p = " << p;
    const ops::AttentionDropoutSpec spec{p, 1, 0};
    EXPECT_TRUE(throws_with(
        [&] {
          fn::attention(leaf({1, 1, 2, 4}), leaf({1, 1, 2, 4}), leaf({1, 1, 2, 4}), {}, spec);
        },
        {"dropout"}))
        << "p = " << p;
  }
  EXPECT_NO_THROW(fn::dropout(x, 0.f, 1, 0));
  EXPECT_NO_THROW(fn::dropout(x, 0.999f, 1, 0));
}

// ---- dropout statistics and reproducibility ----------------------------------------------------

struct ThreadCount {  // restores the OpenMP thread count on scope exit
  int saved = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(saved); }
};

TEST(DropoutStatistics, FractionOfZerosAndKeptScale) {
  const int64_t n = 1000000;
  const Tensor ones = Tensor::full({n}, 1.f);
  for (float p : {0.1f, 0.3f, 0.5f}) {
    const std::vector<float> y = ops::dropout_forward(ones, p, 1234, 0).to_vector();
    const float kept = 1.f / (1.f - p);
    int64_t zeros = 0, others = 0;
    for (float v : y) {
      if (v == 0.f)
        ++zeros;
      else if (v != kept)
        ++others;
    }
    // Binomial(n, p): 6 standard deviations (sqrt(p (1 - p) / n) <= 5e-4) is still only 3e-3.
    const double frac = static_cast<double>(zeros) / n, sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(frac, p, 6 * sigma) << "p = " << p;
    EXPECT_EQ(others, 0) << "kept values must equal x / (1 - p) = " << kept;
    // Inverted dropout keeps the mean: E[y] = 1.
    double sum = 0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum / n, 1.0, 6 * sigma / (1 - p)) << "p = " << p;
  }
}

TEST(DropoutStatistics, SameSeedAndOffsetGiveSameMask) {
  std::mt19937_64 rng(5);
  const Tensor x = randn({1000, 37}, rng);
  const std::vector<float> a = ops::dropout_forward(x, 0.4f, 77, 123).to_vector();
  EXPECT_EQ(a, ops::dropout_forward(x, 0.4f, 77, 123).to_vector());
  EXPECT_NE(a, ops::dropout_forward(x, 0.4f, 78, 123).to_vector());
  EXPECT_NE(a, ops::dropout_forward(x, 0.4f, 77, 124).to_vector());
  // Counter-based: element i at offset k is drawn from counter k + i, so shifting the offset by
  // one shifts the mask by one element.
  const Tensor ones = Tensor::full({5000}, 1.f);
  const std::vector<float> m0 = ops::dropout_forward(ones, 0.5f, 9, 100).to_vector();
  const std::vector<float> m1 = ops::dropout_forward(ones, 0.5f, 9, 101).to_vector();
  for (size_t i = 0; i + 1 < m0.size(); ++i) ASSERT_EQ(m0[i + 1], m1[i]) << i;
  // Backward applies the forward's mask and scale.
  Tensor dx;
  ops::dropout_backward(x, 0.4f, 77, 123, &dx);
  EXPECT_EQ(dx.to_vector(), a);
}

TEST(DropoutStatistics, MaskDoesNotDependOnThreadCount) {
  ThreadCount restore;
  const int64_t n = 1000000;  // far above the kernels' parallel threshold
  const Tensor ones = Tensor::full({n}, 1.f);
  std::mt19937_64 rng(6);
  const Tensor q = randn({2, 3, 40, 8}, rng), k = randn({2, 3, 50, 8}, rng), v = randn({2, 3, 50, 8}, rng);
  const Tensor g = randn({2, 3, 40, 8}, rng);
  const ops::AttentionDropoutSpec spec{0.3f, 31, 4096};
  std::vector<float> drop[2], attn[2], dq[2];
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    drop[t - 1] = ops::dropout_forward(ones, 0.3f, 555, 7).to_vector();
    Tensor probs;
    attn[t - 1] = ops::attention_forward(q, k, v, {}, spec, &probs).to_vector();
    Tensor dqt, dkt, dvt;
    ops::attention_backward(g, q, k, v, probs, {}, spec, &dqt, &dkt, &dvt);
    dq[t - 1] = dqt.to_vector();
  }
  EXPECT_EQ(drop[0], drop[1]);
  // Per head the attention work is the same whichever thread runs it, so even the values match.
  EXPECT_EQ(attn[0], attn[1]);
  EXPECT_EQ(dq[0], dq[1]);
}

}  // namespace
}  // namespace qkv::test
