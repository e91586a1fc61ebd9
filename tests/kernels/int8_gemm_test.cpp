// gemm_int8 against a naive reference written independently of the kernel: quantize each row of A
// and W (scale = max|x| / 127, q = round-half-even(x * 127 / max|x|)), sum the int products in int32,
// dequantize as fma(float(acc), a_scale * w_scale, bias). The kernel's int32 sums are exact and its
// dequantization is that same fused multiply-add, so every output must match BIT FOR BIT: any wrong
// int32 sum (a lost pair, a saturated product, a misplaced weight) changes the float.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "qkv/core/threads.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/int8_gemm.h"

namespace qkv::kernels {
namespace {

struct QuantizedRows {
  std::vector<int32_t> values;  // rows x n
  std::vector<float> scales;
};

QuantizedRows naive_quantize(const float* x, int64_t rows, int64_t n, int64_t ld) {
  QuantizedRows q{std::vector<int32_t>(rows * n), std::vector<float>(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    float m = 0.f;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, std::abs(x[i * ld + k]));
    const bool negligible = m < kNegligibleMax;  // zero or denormal: 127 / m would overflow
    const float inverse = negligible ? 0.f : 127.f / m;
    q.scales[i] = negligible ? 0.f : m / 127.f;
    for (int64_t k = 0; k < n; ++k) q.values[i * n + k] = static_cast<int32_t>(std::nearbyint(x[i * ld + k] * inverse));
  }
  return q;
}

struct Case {
  int64_t M, out, in;
  bool bias;
};

void check_exact(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.M * 1009 + c.out * 31 + c.in * 7 + c.bias));
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t lda = c.in + 5, ldc = c.out + 3;  // strides wider than the rows
  std::vector<float> A(c.M * lda), W(c.out * c.in), bias(c.out);
  for (float& x : A) x = g(rng);
  for (float& x : W) x = g(rng) * 0.05f;
  for (float& x : bias) x = g(rng);
  const float sentinel = 12345.f;  // must survive in the stride padding of C
  std::vector<float> C(c.M * ldc, sentinel);
  const QuantizedWeights qw = quantize_weights(W.data(), c.out, c.in);
  gemm_int8(A.data(), c.M, lda, qw, c.bias ? bias.data() : nullptr, C.data(), ldc);

  const QuantizedRows qa = naive_quantize(A.data(), c.M, c.in, lda), qwr = naive_quantize(W.data(), c.out, c.in, c.in);
  for (int64_t j = 0; j < c.out; ++j) {
    ASSERT_EQ(qw.scales()[j], qwr.scales[j]) << "weight scale " << j;
    for (int64_t k = 0; k < c.in; ++k) ASSERT_EQ(qw.at(j, k), qwr.values[j * c.in + k]) << "weight " << j << " " << k;
  }
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.out; ++j) {
      int32_t acc = 0;
      for (int64_t k = 0; k < c.in; ++k) acc += qa.values[i * c.in + k] * qwr.values[j * c.in + k];
      const float expected = std::fma(static_cast<float>(acc), qa.scales[i] * qwr.scales[j], c.bias ? bias[j] : 0.f);
      ASSERT_EQ(C[i * ldc + j], expected) << "M " << c.M << " out " << c.out << " in " << c.in << " bias " << c.bias
                                          << " at (" << i << ", " << j << "), int32 sum " << acc;
    }
    for (int64_t j = c.out; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], sentinel) << "wrote past the row";
  }
}

TEST(Int8Gemm, IntegerSumsAreExactOnEveryShape) {
  for (int64_t M : {1, 2, 3, 5, 6, 7, 13, 32, 100})
    for (int64_t out : {1, 15, 16, 17, 48, 256, 1000})
      for (int64_t in : {1, 3, 16, 31, 64, 256, 1024})
        for (bool bias : {false, true}) check_exact({M, out, in, bias});
}

// Extreme int8 values everywhere: every product is +-127 * 127 and pairs add up to +-32258, where a
// saturating 16-bit pair sum would show.
TEST(Int8Gemm, FullScaleProductsDoNotSaturate) {
  const int64_t M = 7, out = 33, in = 1024;
  std::vector<float> A(M * in), W(out * in);
  for (int64_t i = 0; i < M * in; ++i) A[i] = (i / 3) % 2 ? 1.f : -1.f;
  for (int64_t i = 0; i < out * in; ++i) W[i] = (i / 5) % 2 ? -2.f : 2.f;
  for (int64_t k = 0; k < in; ++k) A[k] = W[k] = 1.f;  // row 0 against column 0: 1024 * 127 * 127
  std::vector<float> C(M * out);
  gemm_int8(A.data(), M, in, quantize_weights(W.data(), out, in), nullptr, C.data(), out);
  const QuantizedRows qa = naive_quantize(A.data(), M, in, in), qwr = naive_quantize(W.data(), out, in, in);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < out; ++j) {
      int32_t acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += qa.values[i * in + k] * qwr.values[j * in + k];
      ASSERT_EQ(C[i * out + j], static_cast<float>(acc) * (qa.scales[i] * qwr.scales[j])) << i << " " << j;
    }
  EXPECT_FLOAT_EQ(C[0], 1024.f);
}

// Error against float SGEMM. With a = s_a q_a + d_a, |d_a| <= s_a / 2 (rounding to the nearest
// step s_a = max|a_row| / 127), and likewise w = s_w q_w + d_w, |d_w| <= s_w / 2:
//   s_a q_a s_w q_w = (a - d_a)(w - d_w) = a w - a d_w - d_a w + d_a d_w, so
//   |C_int8 - C_exact| <= sum_k (|a_k| s_w / 2 + |w_k| s_a / 2 + s_a s_w / 4).
// The float parts add little: the scales and 127 / max are rounded once (a relative 2^-24 that
// moves the quantization step by a few ulps: the 1.01 factor), the dequantizing fma rounds once,
// and SGEMM's own error is at most about K 2^-24 sum |a w| (covered by 4 K eps sum |a w|).
TEST(Int8Gemm, ErrorAgainstSgemmIsWithinTheQuantizationBound) {
  const int64_t M = 32, in = 512, out = 300;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> A(M * in), W(out * in), bias(out), C(M * out), ref(M * out);
  for (float& x : A) x = g(rng);
  for (float& x : W) x = g(rng) * 0.05f;
  for (float& x : bias) x = g(rng);
  for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), ref.begin() + i * out);
  sgemm(false, true, M, out, in, 1.f, A.data(), in, W.data(), in, 1.f, ref.data(), out);
  const QuantizedWeights qw = quantize_weights(W.data(), out, in);
  gemm_int8(A.data(), M, in, qw, bias.data(), C.data(), out);
  const QuantizedRows qa = naive_quantize(A.data(), M, in, in);
  const double eps = std::numeric_limits<float>::epsilon();
  double worst_fraction_of_bound = 0, sum_error = 0, sum_magnitude = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < out; ++j) {
      const double s_a = qa.scales[i], s_w = qw.scales()[j];
      double bound = 0, magnitude = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double a = std::abs(A[i * in + k]), w = std::abs(W[j * in + k]);
        bound += a * s_w / 2 + w * s_a / 2 + s_a * s_w / 4;
        magnitude += a * w;
      }
      bound = 1.01 * bound + 4 * in * eps * magnitude + 4 * eps * std::abs(ref[i * out + j]);
      const double error = std::abs(static_cast<double>(C[i * out + j]) - ref[i * out + j]);
      ASSERT_LE(error, bound) << i << " " << j;
      worst_fraction_of_bound = std::max(worst_fraction_of_bound, error / bound);
      sum_error += error;
      sum_magnitude += std::abs(ref[i * out + j] - bias[j]);
    }
  // The worst case is far from typical (errors of random sign cancel), but the bound is not vacuous,
  // and the mean error is about 1% of the mean product: int8 is usable for inference.
  EXPECT_GT(worst_fraction_of_bound, 0.01);
  EXPECT_LT(sum_error / sum_magnitude, 0.02);
}

// A row of zeros has scale 0 (no 127 / 0): its outputs are the bias exactly, never NaN; the same for
// a row of denormals (127 / 1e-40 is inf, and 0 * inf NaN) and an output channel of zero weights.
TEST(Int8Gemm, ZeroRowsAndZeroChannelsGiveTheBias) {
  const int64_t M = 9, out = 40, in = 70;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> A(M * in), W(out * in), bias(out), C(M * out);
  for (float& x : A) x = g(rng);
  for (float& x : W) x = g(rng);
  for (float& x : bias) x = g(rng);
  for (int64_t i : {0, 4, 8}) std::fill(A.begin() + i * in, A.begin() + (i + 1) * in, i == 4 ? -0.f : 0.f);
  for (int64_t k = 0; k < in; k += 2) A[8 * in + k] = 1e-40f;  // denormals between zeros
  for (int64_t j : {3, 17}) std::fill(W.begin() + j * in, W.begin() + (j + 1) * in, 0.f);
  const QuantizedWeights qw = quantize_weights(W.data(), out, in);
  EXPECT_EQ(qw.scales()[3], 0.f);
  gemm_int8(A.data(), M, in, qw, bias.data(), C.data(), out);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < out; ++j) {
      ASSERT_FALSE(std::isnan(C[i * out + j])) << i << " " << j;
      if (i % 4 == 0 || j == 3 || j == 17) {
        ASSERT_EQ(C[i * out + j], bias[j]) << i << " " << j;
      }
    }
  std::vector<float> no_bias(M * out, 1.f);
  gemm_int8(A.data(), M, in, qw, nullptr, no_bias.data(), out);
  for (int64_t j = 0; j < out; ++j) ASSERT_EQ(no_bias[4 * out + j], 0.f) << j;
}

TEST(Int8Gemm, OneAndTwoThreadsGiveIdenticalResults) {
  const int64_t M = 37, out = 1000, in = 256;  // large enough to take the parallel path
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> A(M * in), W(out * in), bias(out), C1(M * out), C2(M * out, 7.f);
  for (float& x : A) x = g(rng);
  for (float& x : W) x = g(rng);
  for (float& x : bias) x = g(rng);
  const QuantizedWeights qw = quantize_weights(W.data(), out, in);
  const int threads = num_threads();
  set_num_threads(1);
  gemm_int8(A.data(), M, in, qw, bias.data(), C1.data(), out);
  set_num_threads(2);
  const QuantizedWeights qw2 = quantize_weights(W.data(), out, in);
  gemm_int8(A.data(), M, in, qw2, bias.data(), C2.data(), out);
  set_num_threads(threads);
  EXPECT_EQ(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)), 0);
}

TEST(Int8Gemm, RefusesSumsThatCouldOverflowInt32) {
  EXPECT_THROW(quantize_weights(nullptr, 0, QuantizedWeights::kMaxInFeatures + 1), std::invalid_argument);
}

}  // namespace
}  // namespace qkv::kernels
