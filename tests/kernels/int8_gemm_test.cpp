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
#include <string>
#include <tuple>
#include <vector>

#include "qkv/core/threads.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/int8_gemm_isa.h"
#include "qkv/kernels/isa.h"

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

struct Int8Case {
  int64_t M, out, in;
  bool bias;
};

// gemm_int8 by default, or one build of it (int8_gemm_isa.h).
void check_exact(const Int8Case& c, int8_isa::Gemm gemm = gemm_int8) {
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
  gemm(A.data(), c.M, lda, qw, c.bias ? bias.data() : nullptr, C.data(), ldc);

  const QuantizedRows qa = naive_quantize(A.data(), c.M, c.in, lda), qwr = naive_quantize(W.data(), c.out, c.in, c.in);
  for (int64_t j = 0; j < c.out; ++j) {
    ASSERT_EQ(qw.scales()[j], qwr.scales[j]) << "weight scale " << j;
    int32_t sum = 0;
    for (int64_t k = 0; k < c.in; ++k) {
      ASSERT_EQ(qw.at(j, k), qwr.values[j * c.in + k]) << "weight " << j << " " << k;
      sum += qwr.values[j * c.in + k];
    }
    ASSERT_EQ(qw.column_sums()[j], sum) << "column sum " << j;
  }
  for (int64_t j = c.out; j < qw.panels() * QuantizedWeights::kPanel; ++j) {
    ASSERT_EQ(qw.column_sums()[j], 0) << "padding column " << j;
    for (int64_t k = 0; k < qw.padded_in_features(); ++k) ASSERT_EQ(qw.at(j, k), 0) << "padding " << j << " " << k;
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

// The same against the AVX2 build whatever the CPU, so that a run on an AVX-512 VNNI machine, whose
// gemm_int8 is the VNNI build, checks both.
TEST(Int8Gemm, Avx2BuildIntegerSumsAreExact) {
  for (int64_t M : {1, 6, 7, 13, 100})
    for (int64_t out : {1, 17, 48, 1000})
      for (int64_t in : {1, 2, 3, 5, 31, 256})
        for (bool bias : {false, true}) check_exact({M, out, in, bias}, int8_isa::avx2());
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

// Weights up to 1 MB against at least 8 tiles of rows per thread are split among the threads by rows
// (each quantizes and multiplies its own); other products by panels, each thread an equal share in
// blocks of at most 128 KB. At in = 1024 (16 KB a panel) 1000 outputs are 1,032,192 bytes: 200
// rows split by rows (3 threads: unevenly), 37 by panels; 2000 outputs are twice that (panels:
// 125 of them, several blocks a share, and 3 threads split them unevenly). The sums are exact, so
// every split gives the same bits.
TEST(Int8Gemm, OneTwoAndThreeThreadsGiveIdenticalResults) {
  const int threads = num_threads();
  struct Int8Case {
    int64_t M, out;
  };
  for (const Int8Case c : {Int8Case{37, 1000}, Int8Case{200, 1000}, Int8Case{200, 2000}}) {
    const int64_t M = c.M, out = c.out, in = 1024;  // large enough to take the parallel path
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> A(M * in), W(out * in), bias(out), C1(M * out);
    for (float& x : A) x = g(rng);
    for (float& x : W) x = g(rng);
    for (float& x : bias) x = g(rng);
    const QuantizedWeights qw = quantize_weights(W.data(), out, in);
    set_num_threads(1);
    gemm_int8(A.data(), M, in, qw, bias.data(), C1.data(), out);
    for (int n : {2, 3}) {
      std::vector<float> Cn(M * out, 7.f);
      set_num_threads(n);
      const QuantizedWeights qwn = quantize_weights(W.data(), out, in);
      gemm_int8(A.data(), M, in, qwn, bias.data(), Cn.data(), out);
      EXPECT_EQ(std::memcmp(C1.data(), Cn.data(), C1.size() * sizeof(float)), 0)
          << M << " rows, " << out << " outputs, " << n << " threads";
    }
  }
  set_num_threads(threads);
}

// gemm_int8_many: one A, several weights (attention's W_q, W_k, W_v), A quantized once. Every C
// gets gemm_int8's bits, on both thread splits (weights under 1 MB with 200 rows: by rows; 40 rows or
// a 2000-output weight: by panels), with and without biases, and with C row strides wider than the
// outputs (left untouched past them).
TEST(Int8Gemm, ManyProductsOfOneInputGiveEachProductsBits) {
  struct Int8Case {
    int64_t M, in;
    std::vector<int64_t> outs;
  };
  const int threads = num_threads();
  for (int n : {1, 2, 3})
    for (const Int8Case& c : {Int8Case{200, 256, {256, 256, 256}}, Int8Case{40, 384, {384, 100, 17}},
                          Int8Case{200, 1024, {2000, 64}}, Int8Case{5, 31, {16, 48}}}) {
      set_num_threads(n);
      std::mt19937 rng(static_cast<unsigned>(c.M * 7 + c.in));
      std::normal_distribution<float> g(0.f, 1.f);
      std::vector<float> A(c.M * c.in);
      for (float& x : A) x = g(rng);
      std::vector<QuantizedWeights> weights;
      std::vector<std::vector<float>> biases, expected, got;
      std::vector<Int8Product> products;
      for (size_t o = 0; o < c.outs.size(); ++o) {
        std::vector<float> W(c.outs[o] * c.in), bias(c.outs[o]);
        for (float& x : W) x = g(rng);
        for (float& x : bias) x = g(rng);
        weights.push_back(quantize_weights(W.data(), c.outs[o], c.in));
        biases.push_back(o == 1 ? std::vector<float>() : bias);
        const int64_t ldc = c.outs[o] + 3;
        expected.emplace_back(c.M * ldc, 7.f);
        got.emplace_back(c.M * ldc, 7.f);
      }
      for (size_t o = 0; o < c.outs.size(); ++o) {
        const int64_t ldc = c.outs[o] + 3;
        const float* bias = biases[o].empty() ? nullptr : biases[o].data();
        gemm_int8(A.data(), c.M, c.in, weights[o], bias, expected[o].data(), ldc);
        products.push_back({&weights[o], bias, got[o].data(), ldc});
      }
      gemm_int8_many(A.data(), c.M, c.in, products.data(), static_cast<int64_t>(products.size()));
      for (size_t o = 0; o < c.outs.size(); ++o)
        EXPECT_EQ(std::memcmp(expected[o].data(), got[o].data(), expected[o].size() * sizeof(float)), 0)
            << n << " threads, M " << c.M << ", in " << c.in << ", product " << o << " of " << c.outs.size();
    }
  set_num_threads(threads);
  std::vector<float> A(4 * 8, 1.f), W(16 * 8, 1.f), W2(16 * 9, 1.f), C(4 * 16), C2(4 * 16);
  const QuantizedWeights w = quantize_weights(W.data(), 16, 8), w2 = quantize_weights(W2.data(), 16, 9);
  const Int8Product mismatched[2] = {{&w, nullptr, C.data(), 16}, {&w2, nullptr, C2.data(), 16}};
  EXPECT_THROW(gemm_int8_many(A.data(), 4, 8, mismatched, 2), std::invalid_argument);
}

// A row map (an activation) applied as the rows are quantized gives the bits of gemm_int8 on the
// mapped matrix, on both splits among threads (by rows: 200 rows and a small weight; by panels: a
// 2000-output weight) and with A's stride wider than its rows.
TEST(Int8Gemm, MappedRowsGiveTheBitsOfTheMappedMatrix) {
  const RowMap square_plus_one = [](float* y, const float* x, int64_t n) {
    for (int64_t k = 0; k < n; ++k) y[k] = x[k] * x[k] + 1.f;
  };
  const int threads = num_threads();
  for (int n : {1, 2, 3})
    for (const Int8Case& c : {Int8Case{200, 256, 384, true}, Int8Case{200, 2000, 512, false}, Int8Case{7, 33, 45, true}}) {
      set_num_threads(n);
      std::mt19937 rng(static_cast<unsigned>(c.M + c.out + c.in));
      std::normal_distribution<float> g(0.f, 1.f);
      const int64_t lda = c.in + 3;
      std::vector<float> A(c.M * lda), mapped(c.M * c.in), W(c.out * c.in), bias(c.out);
      for (float& x : A) x = g(rng);
      for (float& x : W) x = g(rng);
      for (float& x : bias) x = g(rng);
      for (int64_t i = 0; i < c.M; ++i) square_plus_one(mapped.data() + i * c.in, A.data() + i * lda, c.in);
      const QuantizedWeights qw = quantize_weights(W.data(), c.out, c.in);
      std::vector<float> expected(c.M * c.out), got(c.M * c.out);
      const float* b = c.bias ? bias.data() : nullptr;
      gemm_int8(mapped.data(), c.M, c.in, qw, b, expected.data(), c.out);
      gemm_int8_mapped(A.data(), c.M, lda, square_plus_one, qw, b, got.data(), c.out);
      EXPECT_EQ(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(float)), 0)
          << n << " threads, M " << c.M << ", out " << c.out << ", in " << c.in;
    }
  set_num_threads(threads);
}

TEST(Int8Gemm, RefusesSumsThatCouldOverflowInt32) {
  EXPECT_THROW(quantize_weights(nullptr, 0, QuantizedWeights::kMaxInFeatures + 1), std::invalid_argument);
}

// The AVX-512 VNNI build (u8 activations + 128, vpdpbusd, the +128 taken off with the column sums)
// against the AVX2 build (int16 activations, vpmaddwd). Both sum exactly in int32 and dequantize with
// the same fma, so they must agree BIT FOR BIT: a wrong compensation, a misplaced quad, a lost tail row
// or column changes the float.
int8_isa::Gemm vnni_or_skip_message(std::string& why) {
  const int8_isa::Gemm vnni = int8_isa::vnni_or_null();
  if (!vnni) why = "the AVX-512 VNNI build needs Isa::Avx512Vnni; the kernels run " + isa_description();
  return vnni;
}

// Rows of A with every kind of scale: normal ones, zeros (scale 0: the outputs are the bias), rows
// of tiny and of huge values (the same int8 values, scales far apart), denormals between zeros (counted
// as zero), and one outlier (every other value quantizes to 0 or +-1).
void fill_varied_rows(std::vector<float>& A, int64_t M, int64_t in, int64_t lda, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  for (float& x : A) x = g(rng);
  for (int64_t i = 0; i < M; ++i) {
    float* row = A.data() + i * lda;
    switch (i % 6) {
      case 1: std::fill(row, row + in, 0.f); break;
      case 2: for (int64_t k = 0; k < in; ++k) row[k] *= 1e-30f; break;
      case 3: for (int64_t k = 0; k < in; ++k) row[k] *= 1e30f; break;
      case 4: for (int64_t k = 0; k < in; ++k) row[k] = k % 2 ? 1e-40f : 0.f; break;
      case 5: row[(i * 7) % in] = 1e4f; break;
      default: break;
    }
  }
}

// Both builds on one shape, each output compared bit for bit; the stride padding of C stays untouched.
void check_builds_agree(int8_isa::Gemm vnni, int64_t M, int64_t out, int64_t in, bool bias, int64_t lda_extra,
                        int64_t ldc_extra) {
  std::mt19937 rng(static_cast<unsigned>(M * 7919 + out * 101 + in * 13 + bias));
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t lda = in + lda_extra, ldc = out + ldc_extra;
  std::vector<float> A(M * lda), W(out * in), b(out);
  fill_varied_rows(A, M, in, lda, rng);
  for (float& x : W) x = g(rng) * 0.05f;
  for (int64_t j = 0; j < out; j += 7) std::fill(W.begin() + j * in, W.begin() + (j + 1) * in, 0.f);  // zero channels
  for (float& x : b) x = g(rng);
  const QuantizedWeights qw = quantize_weights(W.data(), out, in);
  const float sentinel = -777.f;
  std::vector<float> C_avx2(M * ldc, sentinel), C_vnni(M * ldc, sentinel);
  int8_isa::avx2()(A.data(), M, lda, qw, bias ? b.data() : nullptr, C_avx2.data(), ldc);
  vnni(A.data(), M, lda, qw, bias ? b.data() : nullptr, C_vnni.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const float expected = j < out ? C_avx2[i * ldc + j] : sentinel;
      ASSERT_EQ(std::memcmp(&C_vnni[i * ldc + j], &expected, sizeof(float)), 0)
          << "M " << M << " out " << out << " in " << in << " bias " << bias << " lda " << lda << " ldc " << ldc
          << " at (" << i << ", " << j << "): vnni " << C_vnni[i * ldc + j] << ", avx2 " << expected;
    }
}

TEST(Int8GemmVnni, EqualsTheAvx2BuildBitForBitOnEveryShape) {
  std::string why;
  const int8_isa::Gemm vnni = vnni_or_skip_message(why);
  if (!vnni) GTEST_SKIP() << why;
  int n = 0;
  // Tails of every kind: rows past the 8-row tiles and 32-row chunks, columns past the 16- and
  // 32-column tiles, in_features past the input quads.
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 100, 127, 200})
    for (int64_t out : {1, 15, 16, 17, 31, 32, 33, 48, 80, 257})
      for (int64_t in : {1, 2, 3, 4, 5, 6, 7, 9, 17, 30, 64, 129, 255}) {
        ++n;
        check_builds_agree(vnni, M, out, in, n % 2 == 0, n % 3, n % 5);
        if (HasFatalFailure()) return;
      }
  // Long rows: panels that leave L1, and the split among threads.
  for (int64_t M : {1, 8, 9, 33, 200})
    for (int64_t out : {17, 100, 1000})
      for (int64_t in : {1000, 4096}) {
        ++n;
        check_builds_agree(vnni, M, out, in, n % 2 == 0, n % 3, 2 * (n % 2));
        if (HasFatalFailure()) return;
      }
}

TEST(Int8GemmVnni, IntegerSumsAreExact) {
  std::string why;
  const int8_isa::Gemm vnni = vnni_or_skip_message(why);
  if (!vnni) GTEST_SKIP() << why;
  for (int64_t M : {1, 7, 8, 9, 33})
    for (int64_t out : {1, 17, 32, 48, 1000})
      for (int64_t in : {1, 3, 4, 31, 256})
        for (bool bias : {false, true}) check_exact({M, out, in, bias}, vnni);
}

// Full-scale values at the longest rows quantize_weights accepts: every activation is +-127, +128
// gives 255 or 1, and 255 * 127 * K passes 2^31 (the VNNI sums wrap); taking off 128 * sum_k W wraps
// back to the exact sum, which is itself within int32 (|127 * 127 * K| < 2^31). Against an int64 sum.
void check_full_scale_sums(int8_isa::Gemm vnni) {
  const int64_t M = 3, out = 18, in = QuantizedWeights::kMaxInFeatures;
  std::vector<float> A(M * in), W(out * in);
  for (int64_t k = 0; k < in; ++k) {
    A[k] = 1.f;                               // row 0: +127 everywhere
    A[in + k] = -1.f;                         // row 1: -127
    A[2 * in + k] = (k / 3) % 2 ? 1.f : -1.f;  // row 2: mixed signs
  }
  for (int64_t j = 0; j < out; ++j)
    for (int64_t k = 0; k < in; ++k) W[j * in + k] = j % 3 == 0 ? 1.f : j % 3 == 1 ? -1.f : ((k + j) % 5 ? 1.f : -1.f);
  const QuantizedWeights qw = quantize_weights(W.data(), out, in);
  std::vector<float> C_vnni(M * out), C_avx2(M * out);
  vnni(A.data(), M, in, qw, nullptr, C_vnni.data(), out);
  int8_isa::avx2()(A.data(), M, in, qw, nullptr, C_avx2.data(), out);
  const QuantizedRows qa = naive_quantize(A.data(), M, in, in), qwr = naive_quantize(W.data(), out, in, in);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < out; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += int64_t{qa.values[i * in + k]} * qwr.values[j * in + k];
      ASSERT_LE(std::abs(acc), int64_t{INT32_MAX});
      const float expected = static_cast<float>(acc) * (qa.scales[i] * qwr.scales[j]);
      ASSERT_EQ(C_vnni[i * out + j], expected) << i << " " << j << ", int sum " << acc;
      ASSERT_EQ(C_avx2[i * out + j], expected) << i << " " << j << ", int sum " << acc;
    }
  EXPECT_FLOAT_EQ(C_vnni[0], static_cast<float>(in));  // 127 * 127 * K, scaled by (1/127)^2
}

TEST(Int8GemmVnni, FullScaleSumsAtTheLongestRowsAreExact) {
  std::string why;
  const int8_isa::Gemm vnni = vnni_or_skip_message(why);
  if (!vnni) GTEST_SKIP() << why;
  check_full_scale_sums(vnni);
}

void check_thread_counts_agree(int8_isa::Gemm vnni) {
  const int threads = num_threads();
  for (int64_t out : {1000, 1008, 5 * 16 + 3}) {  // odd numbers of panels: a block may end in a lone panel
    const int64_t M = 37, in = 256;
    std::mt19937 rng(static_cast<unsigned>(out));
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> A(M * in), W(out * in), bias(out), C1(M * out), C2(M * out, 7.f);
    fill_varied_rows(A, M, in, in, rng);
    for (float& x : W) x = g(rng);
    for (float& x : bias) x = g(rng);
    const QuantizedWeights qw = quantize_weights(W.data(), out, in);
    set_num_threads(1);
    vnni(A.data(), M, in, qw, bias.data(), C1.data(), out);
    set_num_threads(2);
    vnni(A.data(), M, in, qw, bias.data(), C2.data(), out);
    EXPECT_EQ(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)), 0) << out;
  }
  set_num_threads(threads);
}

TEST(Int8GemmVnni, OneAndTwoThreadsGiveIdenticalResults) {
  std::string why;
  const int8_isa::Gemm vnni = vnni_or_skip_message(why);
  if (!vnni) GTEST_SKIP() << why;
  check_thread_counts_agree(vnni);
}

// gemm_int8 runs the build kernels/isa.h enables: AMX where it is, else VNNI,
// else AVX2 (QKV_ISA=avx2 forces it).
TEST(Int8GemmVnni, GemmInt8RunsTheEnabledBuild) {
  EXPECT_EQ(int8_isa::chosen(), isa_enabled(Isa::Amx)           ? int8_isa::amx_or_null()
                                : isa_enabled(Isa::Avx512Vnni) ? int8_isa::vnni_or_null()
                                                               : int8_isa::avx2());
  EXPECT_EQ(int8_isa::vnni_or_null() != nullptr, isa_enabled(Isa::Avx512Vnni));
  EXPECT_EQ(int8_isa::amx_or_null() != nullptr, isa_enabled(Isa::Amx));
}

// gemm_int8 hands a product of few rows to the VNNI build where AMX is chosen (int8_gemm_isa.h):
// either side of that line, the AVX2 build's bits.
TEST(Int8GemmVnni, GemmInt8GivesTheAvx2BitsEitherSideOfTheAmxRowLine) {
  for (int64_t M : {int64_t{1}, int8_isa::kAmxMinRows - 1, int8_isa::kAmxMinRows, int8_isa::kAmxMinRows + 33}) {
    check_builds_agree(gemm_int8, M, 70, 200, true, 3, 1);
    if (HasFatalFailure()) return;
  }
}

// The AMX build (int8 activations, TDPBSSD, the weights repacked into tiles per call, K padded to
// 64 and rows to 32 from zeroed copies) against the AVX2 build, BIT FOR BIT like the VNNI build: on
// its model of the tiles on every CPU, and on the tiles where the CPU has AMX (QKV_ISA=amx or not).
struct NamedGemm {
  const char* name;
  int8_isa::Gemm gemm;
};
std::vector<NamedGemm> amx_builds() {
  std::vector<NamedGemm> b{{"amx_model", int8_isa::amx_model()}};
  if (int8_isa::amx_where_the_cpu_has_it()) b.push_back({"amx", int8_isa::amx_where_the_cpu_has_it()});
  else std::cerr << "note: the AMX build runs on its model of the tiles only here (" << isa_description() << ")\n";
  return b;
}

TEST(Int8GemmAmx, EqualsTheAvx2BuildBitForBitOnEveryShape) {
  for (const NamedGemm& b : amx_builds()) {
    SCOPED_TRACE(b.name);
    int n = 0;
    // Tails: rows past the 16-row tiles and 32-row blocks, columns past the 16- and 32-column
    // tiles (a lone last panel), in_features past the input quads and the 64-byte tile rows.
    for (int64_t M : {1, 2, 15, 16, 17, 31, 32, 33, 64, 100})
      for (int64_t out : {1, 15, 16, 17, 31, 32, 33, 48, 80, 257})
        for (int64_t in : {1, 3, 4, 5, 17, 63, 64, 65, 129, 255}) {
          ++n;
          check_builds_agree(b.gemm, M, out, in, n % 2 == 0, n % 3, n % 5);
          if (HasFatalFailure()) return;
        }
    // Long rows: several blocks of panels, and the split among threads (by panels and by rows).
    for (auto [M, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 1000, 1000}, {33, 100, 4096}, {200, 17, 1000},
                              {600, 40, 256}, {9, 300, 2000}}) {
      ++n;
      check_builds_agree(b.gemm, M, out, in, n % 2 == 0, n % 3, 2 * (n % 2));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Int8GemmAmx, IntegerSumsAreExact) {
  for (const NamedGemm& b : amx_builds())
    for (int64_t M : {1, 17, 33})
      for (int64_t out : {1, 17, 48})
        for (int64_t in : {1, 3, 4, 31, 256})
          for (bool bias : {false, true}) check_exact({M, out, in, bias}, b.gemm);
}

TEST(Int8GemmAmx, FullScaleSumsAtTheLongestRowsAreExact) {
  for (const NamedGemm& b : amx_builds()) check_full_scale_sums(b.gemm);
}

TEST(Int8GemmAmx, OneAndTwoThreadsGiveIdenticalResults) {
  for (const NamedGemm& b : amx_builds()) check_thread_counts_agree(b.gemm);
}

}  // namespace
}  // namespace qkv::kernels
