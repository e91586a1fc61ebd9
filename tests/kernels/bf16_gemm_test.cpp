// gemm_bf16 (products of bf16-rounded operands summed in float32), each build (bf16_gemm.h), against
// a double-precision loop over the same bf16-rounded operands, for every transpose combination and
// the shapes that exercise its tails: rows of the 8-row tile (M 1, 7, 9, 17), columns of the 32-wide
// panels (N 1, 17, 31, 33, 70), K odd (a pair half padded), K blocks (513, 1025, 2049), strides,
// alpha, beta and bias. Then the properties training relies on: bits independent of the thread count
// and of the rows around a row, NaN propagated, and the two builds agree.
//
// Tolerance: the operands are exact bf16 values and their products exact in float32, so only the
// float32 sums round: at most about K * 2^-24 * sum_k |a_k b_k|; we allow 4 K eps sum |a b|. (vdpbf16ps
// treats bf16 denormals as zero: the operands here are far from them.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/threads.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/isa.h"

namespace qkv::kernels {
namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  bool bias;
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C, bias;
};

Operands make_operands(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Operands o;
  o.lda = (c.ta ? c.M : c.K) + 3, o.ldb = (c.tb ? c.K : c.N) + 2, o.ldc = c.N + 5;
  o.A.resize((c.ta ? c.K : c.M) * o.lda), o.B.resize((c.tb ? c.N : c.K) * o.ldb), o.C.resize(c.M * o.ldc);
  for (float& x : o.A) x = u(rng);
  for (float& x : o.B) x = u(rng);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < o.ldc; ++j)  // the stride padding holds a sentinel that must survive
      o.C[i * o.ldc + j] = j >= c.N ? 12345.f : c.beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  if (c.bias) {
    o.bias.resize(c.N);
    for (float& x : o.bias) x = u(rng);
  }
  return o;
}

struct Build {
  const char* name;
  bf16_isa::Gemm gemm;
};

// Every build this CPU can run; the AMX build's blocking always, on its scalar model of the tiles.
std::vector<Build> builds() {
  std::vector<Build> b{{"widened", bf16_isa::widened()}, {"amx_emulated", bf16_isa::amx_emulated()}};
  if (bf16_isa::avx512_bf16_or_null()) b.push_back({"avx512_bf16", bf16_isa::avx512_bf16_or_null()});
  if (bf16_isa::amx_where_the_cpu_has_it()) b.push_back({"amx", bf16_isa::amx_where_the_cpu_has_it()});
  return b;
}

void run(const Build& b, const Case& c, Operands& o) {
  b.gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, o.C.data(), o.ldc,
         c.bias ? o.bias.data() : nullptr);
}

double rounded(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Every row, or every row_step-th and the last (large products).
void check_against_double(const Build& b, const Case& c, int64_t row_step = 1) {
  Operands o = make_operands(c, static_cast<unsigned>(c.M * 131 + c.N * 17 + c.K * 3 + c.ta * 2 + c.tb));
  const std::vector<float> C0 = o.C;
  run(b, c, o);
  const double eps = std::numeric_limits<float>::epsilon();
  const auto next_row = [&](int64_t i) { return i + row_step < c.M || i == c.M - 1 ? i + row_step : c.M - 1; };
  for (int64_t i = 0; i < c.M; i = next_row(i)) {
    for (int64_t j = 0; j < c.N; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = rounded(c.ta ? o.A[k * o.lda + i] : o.A[i * o.lda + k]) *
                         rounded(c.tb ? o.B[j * o.ldb + k] : o.B[k * o.ldb + j]);
        sum += p, magnitude += std::fabs(p);
      }
      const double old = c.beta == 0.f ? 0.0 : c.beta * static_cast<double>(C0[i * o.ldc + j]);
      const double bias = c.bias ? o.bias[j] : 0.0;
      const double expected = c.alpha * sum + old + bias;
      const double tolerance = 4 * c.K * eps * std::fabs(c.alpha) * magnitude +
                               4 * eps * (std::fabs(old) + std::fabs(bias) + std::fabs(expected)) + 1e-30;
      ASSERT_NEAR(o.C[i * o.ldc + j], expected, tolerance)
          << b.name << ": ta " << c.ta << " tb " << c.tb << " M " << c.M << " N " << c.N << " K " << c.K
          << " alpha " << c.alpha << " beta " << c.beta << " bias " << c.bias << " at (" << i << ", " << j << ")";
    }
    for (int64_t j = c.N; j < o.ldc; ++j) ASSERT_EQ(o.C[i * o.ldc + j], 12345.f) << "padding of row " << i;
  }
}

TEST(Bf16Gemm, EachBuildMatchesDoublePrecisionOnTheRoundedOperands) {
  if (!bf16_isa::avx512_bf16_or_null())
    std::cerr << "note: the avx512_bf16 build is not tested here (" << isa_description() << ")\n";
  if (!bf16_isa::amx_where_the_cpu_has_it())
    std::cerr << "note: the amx build runs on its model of the tiles only here (" << isa_description() << ")\n";
  for (const Build& b : builds())
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        for (int64_t M : {1, 7, 9, 17})
          for (int64_t N : {1, 17, 31, 33, 70}) check_against_double(b, {ta, tb, M, N, 7, 1.f, 0.f, false});
        for (int64_t K : {1, 2, 31, 33, 64, 513, 1025, 2049})  // the AMX build: pairs of tiles whole and padded
          check_against_double(b, {ta, tb, 13, 40, K, 1.f, 0.f, false});
        check_against_double(b, {ta, tb, 33, 65, 96, 1.f, 0.f, true});  // one row and column past 32-blocks
        check_against_double(b, {ta, tb, 50, 40, 600, 0.5f, 0.f, true});
        check_against_double(b, {ta, tb, 50, 40, 600, 1.f, 1.f, false});     // gradient accumulation
        check_against_double(b, {ta, tb, 19, 21, 1100, -2.f, 0.5f, true});   // later K blocks add up
      }
}

TEST(Bf16Gemm, ATransposedWithAShortLastKBlockStaysInItsScratch) {
  const int saved = num_threads();
  for (const Build& b : builds())
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t K : {1025, 3201}) check_against_double(b, {true, false, 400, 40, K, 1.f, 0.f, false});
    }
  set_num_threads(saved);
}

TEST(Bf16Gemm, BitsDoNotDependOnTheThreadCountNorOnOtherRows) {
  const int saved = num_threads();
  for (const Build& b : builds())
    // Two threads split M > N by rows, M < N by panels (when both can be shared), and short sides the other way.
    for (const Case& c : {Case{false, true, 300, 200, 700, 1.f, 0.f, true}, Case{false, false, 300, 20, 1300, 1.f, 1.f, false},
                          Case{true, false, 200, 72, 900, 1.f, 0.f, false}, Case{true, true, 9, 300, 600, 1.f, 0.f, false},
                          Case{false, true, 100, 400, 300, 1.f, 0.f, false}, Case{true, false, 96, 300, 500, 1.f, 1.f, true}}) {
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        Operands o = make_operands(c, 7);
        run(b, c, o);
        results.push_back(o.C);
      }
      EXPECT_EQ(results[0], results[1]) << b.name << ": ta " << c.ta << " tb " << c.tb << " M " << c.M;
      if (c.ta) continue;  // the first 7 rows alone, the same bits (A read in place by rows)
      Operands few = make_operands(c, 7);
      Case head = c;
      head.M = 7;
      run(b, head, few);
      for (int64_t i = 0; i < 7; ++i)
        for (int64_t j = 0; j < c.N; ++j)
          ASSERT_EQ(few.C[i * few.ldc + j], results[0][i * few.ldc + j]) << b.name << " row " << i << " col " << j;
    }
  set_num_threads(saved);
}

// gemm_bf16_b_bits: B given as bf16 bits (a bf16 copy kept for a backward) gives each build's bits of
// the same product with B's float32 values, which are exactly those bf16 values: tails of rows,
// panels and K (odd K pads a pair), K blocks sharing a packing phase (2100), beta, the row and panel
// splits of two threads, a padded row stride.
TEST(Bf16Gemm, BAsBf16BitsGivesTheBitsOfBAsItsFloatValues) {
  const int saved = num_threads();
  for (const Build& b : builds()) {
    const bf16_isa::GemmBBits with_bits = bf16_isa::b_bits_form_of(b.gemm);
    ASSERT_NE(with_bits, nullptr) << b.name;
    const bool slow = b.name == std::string("amx_emulated");
    for (int threads : {1, 2})
      for (bool ta : {false, true})
        for (const auto& [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                 {1, 1, 1}, {9, 17, 7}, {13, 70, 513}, {300, 33, 2100}, {40, 300, 200}}) {
          if (slow && M * N * K > 2'000'000) continue;
          set_num_threads(threads);
          const Case c{ta, false, M, N, K, 0.75f, ta ? 0.5f : 0.f, false};
          Operands o = make_operands(c, static_cast<unsigned>(M + N + K));
          std::vector<uint16_t> bits(o.B.size());
          for (size_t i = 0; i < o.B.size(); ++i) {
            bits[i] = f32_to_bf16(o.B[i]).bits;
            o.B[i] = bf16_to_f32(bfloat16{bits[i]});
          }
          std::vector<float> C_bits = o.C;
          with_bits(ta, M, N, K, c.alpha, o.A.data(), o.lda, bits.data(), o.ldb, c.beta, C_bits.data(), o.ldc);
          run(b, c, o);
          EXPECT_EQ(C_bits, o.C) << b.name << ": ta " << ta << " M " << M << " N " << N << " K " << K << ", "
                                 << threads << " threads";
        }
  }
  set_num_threads(saved);
}

// gemm_bf16_weight_and_bias_grad: dW and db (dY's column sums, added to what db holds) with the bits
// of the product and of column_sum_accumulate made apart, whichever build runs it: a row split with
// a shared B and K blocks in one phase, a panel split (where only the first panels' thread may sum),
// tails, X as floats and as bf16 bits, beta, a padded dY, on 1 and 2 threads.
TEST(Bf16Gemm, WeightAndBiasGradientsGiveTheBitsOfTheProductAndTheColumnSums) {
  const int saved = num_threads();
  for (int threads : {1, 2})
    for (bool bits : {false, true})
      for (const auto& [M, N, K, padded] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
               {1, 1, 1, false}, {9, 33, 7, true}, {300, 40, 2100, false}, {40, 300, 513, false}, {256, 256, 1200, true}}) {
        set_num_threads(threads);
        const Case c{true, false, M, N, K, 1.f, bits ? 0.f : 1.f, false};
        Operands o = make_operands(c, static_cast<unsigned>(M * 7 + N + K));
        const int64_t ld_dy = padded ? o.lda : M;
        std::vector<uint16_t> x_bits(o.B.size());
        for (size_t i = 0; i < o.B.size(); ++i) x_bits[i] = f32_to_bf16(o.B[i]).bits;
        std::vector<float> db(static_cast<size_t>(M)), db_apart;
        for (int64_t i = 0; i < M; ++i) db[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i % 5) - 0.5f;
        db_apart = db;
        std::vector<float> dw = o.C, dw_apart = o.C;
        const float* X = bits ? nullptr : o.B.data();
        const uint16_t* Xb = bits ? x_bits.data() : nullptr;
        gemm_bf16_weight_and_bias_grad(M, N, K, o.A.data(), ld_dy, X, Xb, o.ldb, c.beta, dw.data(), o.ldc, db.data());
        bf16_isa::weight_and_bias_grad_in_two_calls(bf16_isa::chosen(), M, N, K, o.A.data(), ld_dy, X, Xb, o.ldb,
                                                   c.beta, dw_apart.data(), o.ldc, db_apart.data());
        const std::string what = "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                                 (bits ? ", X as bits, " : ", X as floats, ") + std::to_string(threads) + " threads";
        EXPECT_EQ(dw, dw_apart) << what;
        EXPECT_EQ(db, db_apart) << what;
      }
  set_num_threads(saved);
}

// Attention calls products from inside its own loop over heads: there a product runs on its
// caller's thread, without a region (and so without barriers) of its own, and gives the bits it gives
// outside. Two threads at once, each its own row-split product with a shared-B walk of several phases.
TEST(Bf16Gemm, InsideAParallelRegionEachCallerRunsItsOwnProductToTheSameBits) {
  const int saved = num_threads();
  set_num_threads(2);
  for (const Build& b : builds()) {
    if (b.name == std::string("amx_emulated")) continue;  // scalar: slow
    const Case c{true, false, 256, 256, 2100, 1.f, 0.f, false};
    Operands outside = make_operands(c, 5);
    run(b, c, outside);
    std::vector<Operands> inside{make_operands(c, 5), make_operands(c, 5)};
#pragma omp parallel for num_threads(2)
    for (int t = 0; t < 2; ++t) run(b, c, inside[static_cast<size_t>(t)]);
    for (const Operands& o : inside) EXPECT_EQ(o.C, outside.C) << b.name;
  }
  set_num_threads(saved);
}

// A row split packs each B block once for both threads (blocking::walk_shared_b_blocks): a product
// of two B blocks (65 panels, 64 a block at K blocks of 1024) and two K blocks, split by rows
// (M >= N), every 37th row against double precision, on 1 and 2 threads; and a narrow op(B) whose
// K blocks share one packing phase. Not the emulated AMX build (scalar: too slow at this size).
TEST(Bf16Gemm, ARowSplitSharesEachPackedBBlockAcrossItsThreads) {
  const int saved = num_threads();
  for (const Build& b : builds()) {
    if (b.name == std::string("amx_emulated")) continue;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      check_against_double(b, {false, false, 2090, 2080, 1100, 0.5f, 1.f, true}, 37);
      check_against_double(b, {true, true, 300, 40, 700, 1.f, 0.f, false});  // one B block: one panel each
      // A narrow op(B) (2 panels) over six K blocks: all packed in one phase, each in its own slot.
      check_against_double(b, {true, false, 300, 40, 2600, 1.f, 0.5f, true}, 7);
    }
  }
  set_num_threads(saved);
}

TEST(Bf16Gemm, NanAndInfinityReachTheirRowAndColumnOnly) {
  for (const Build& b : builds()) {
    const Case c{false, true, 9, 40, 33, 1.f, 0.f, false};
    Operands o = make_operands(c, 3);
    o.A[2 * o.lda + 5] = std::numeric_limits<float>::quiet_NaN();
    o.B[7 * o.ldb + 4] = std::numeric_limits<float>::infinity();
    run(b, c, o);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        const float x = o.C[i * o.ldc + j];
        if (i == 2) EXPECT_TRUE(std::isnan(x)) << b.name << " (" << i << ", " << j << ")";
        else if (j == 7) EXPECT_TRUE(std::isinf(x) || std::isnan(x)) << b.name << " (" << i << ", " << j << ")";
        else EXPECT_TRUE(std::isfinite(x)) << b.name << " (" << i << ", " << j << ")";
      }
  }
}

TEST(Bf16Gemm, TheBuildsAgreeOnATrainingShape) {
  const Case c{false, true, 257, 300, 512, 1.f, 0.f, true};
  Operands wide = make_operands(c, 11);
  run(builds()[0], c, wide);
  for (size_t b = 1; b < builds().size(); ++b) {
    Operands other = make_operands(c, 11);
    run(builds()[b], c, other);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j)
        ASSERT_NEAR(other.C[i * c.N + 5 * i + j], wide.C[i * c.N + 5 * i + j], 2e-5)
            << builds()[b].name << " (" << i << ", " << j << ")";
  }
}

TEST(Bf16Gemm, KZeroScalesCByBetaAndAddsTheBias) {
  for (const Build& b : builds()) {
    const Case c{false, false, 3, 4, 0, 1.f, 0.5f, true};
    Operands o = make_operands(c, 1);
    const std::vector<float> C0 = o.C;
    run(b, c, o);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(o.C[i * o.ldc + j], 0.5f * C0[i * o.ldc + j] + o.bias[j]);
  }
}

}  // namespace
}  // namespace qkv::kernels

namespace qkv::kernels {
namespace {

// Inference's packed bf16 weights (pack_weights_into + the packed product) give the bits of the
// same build's per-call product on the float32 weight: the same words, K blocks and tiles, packed
// once instead of per call. Each packed build: avx512_bf16 (its pairs as they are) and AMX (pairs
// padded to 16; on its model of the tiles everywhere, on the tiles where the CPU has them). Shapes:
// decoding's few rows and an encoder's many, K over several blocks (2500) and odd, features past a
// 32-column panel; bias or not; strided A and C.
struct PackedBuild {
  const char* name;
  int64_t pair_multiple;
  bf16_isa::Gemm per_call;
  void (*packed)(const float*, int64_t, int64_t, const uint32_t*, int64_t, int64_t, const float*, float*, int64_t);
};

std::vector<PackedBuild> packed_builds() {
  std::vector<PackedBuild> b{{"amx_emulated", 16, bf16_isa::amx_emulated(), bf16_isa::gemm_packed_amx_emulated}};
  if (bf16_isa::avx512_bf16_or_null())
    b.push_back({"avx512_bf16", 1, bf16_isa::avx512_bf16_or_null(), bf16_isa::gemm_packed_avx512_bf16_unchecked});
  if (bf16_isa::amx_where_the_cpu_has_it())
    b.push_back({"amx", 16, bf16_isa::amx_where_the_cpu_has_it(), bf16_isa::gemm_packed_amx_unchecked});
  return b;
}

TEST(Bf16Gemm, PackedWeightsGiveTheBitsOfThePerCallProduct) {
  for (const PackedBuild& b : packed_builds())
    for (const Case& c :
         {Case{false, true, 3, 70, 33, 1.f, 0.f, true}, Case{false, true, 12, 512, 512, 1.f, 0.f, false},
          Case{false, true, 300, 45, 2500, 1.f, 0.f, true}, Case{false, true, 1, 1, 1, 1.f, 0.f, true}}) {
      Operands o = make_operands(c, 5), packed_out = o;
      run(Build{b.name, b.per_call}, c, o);
      std::vector<float> W(static_cast<size_t>(c.N * c.K));  // (out, in) without the test's row padding
      for (int64_t n = 0; n < c.N; ++n)
        for (int64_t k = 0; k < c.K; ++k) W[n * c.K + k] = o.B[n * o.ldb + k];
      std::vector<uint32_t> storage(static_cast<size_t>(bf16_isa::packed_words(c.N, c.K, b.pair_multiple)) + 16);
      uint32_t* aligned = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16;
      bf16_isa::pack_weights_into(W.data(), c.N, c.K, b.pair_multiple, aligned);
      b.packed(packed_out.A.data(), c.M, packed_out.lda, aligned, c.N, c.K, c.bias ? packed_out.bias.data() : nullptr,
               packed_out.C.data(), packed_out.ldc);
      EXPECT_EQ(packed_out.C, o.C) << b.name << ": M " << c.M << " N " << c.N << " K " << c.K;
    }
}

// The public entry points pack in the layout of the build gemm_bf16_packed runs.
TEST(Bf16Gemm, ThePublicPackingFollowsTheChosenBuild) {
  EXPECT_EQ(bf16_isa::packed_pair_multiple(), bf16_isa::amx_or_null() ? 16 : 1);
  EXPECT_EQ(bf16_isa::packed_words(70, 33, 1), 3 * 32 * 17);
  EXPECT_EQ(bf16_isa::packed_words(70, 33, 16), 3 * 32 * 32);
  EXPECT_EQ(bf16_isa::packed_words(45, 2500, 16), 2 * 32 * (432 + 432 + 416));  // K blocks of 834, 834, 832
  EXPECT_EQ(packed_bf16_words(70, 33), bf16_isa::packed_words(70, 33, bf16_isa::packed_pair_multiple()));
  if (!packed_bf16_available()) GTEST_SKIP() << "no packed bf16 build here: " << isa_description();
  const Case c{false, true, 5, 40, 100, 1.f, 0.f, true};
  Operands o = make_operands(c, 9), packed_out = o;
  run(Build{"chosen", bf16_isa::chosen()}, c, o);
  std::vector<float> W(static_cast<size_t>(c.N * c.K));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) W[n * c.K + k] = o.B[n * o.ldb + k];
  std::vector<uint32_t> storage(static_cast<size_t>(packed_bf16_words(c.N, c.K)) + 16);
  uint32_t* aligned = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16;
  pack_bf16_weights_into(W.data(), c.N, c.K, aligned);
  gemm_bf16_packed(packed_out.A.data(), c.M, packed_out.lda, aligned, c.N, c.K, packed_out.bias.data(),
                   packed_out.C.data(), packed_out.ldc);
  EXPECT_EQ(packed_out.C, o.C) << gemm_bf16_description();
}

// The widened build rounds its operands 8 lanes at a time: each value becomes what core/dtype.h's
// f32_to_bf16 gives (nearest even, ties both ways, carries into the exponent, the largest finite
// values rounding to infinity, infinities kept, a NaN kept as a NaN, denormals rounded as they are).
// A product with K = 1 and B = 1 returns A's values as rounded, every one of them in a row longer
// than 8 (the vector part and the scalar tail), and through the transposed A as well.
TEST(Bf16Gemm, TheWidenedBuildRoundsEachOperandAsDtypeDoes) {
  std::vector<float> values;
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x3fffffffu, 0x7f7fffffu, 0xff7fffffu,
                     0x7f800000u, 0xff800000u, 0x00000001u, 0x00008000u, 0x80018000u, 0x00000000u, 0x80000000u,
                     0x7fc00000u, 0x7f800001u, 0xffa00000u})
    values.push_back(bits_float(u));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (int i = 0; i < 45; ++i) values.push_back(u(rng));
  const int64_t n = static_cast<int64_t>(values.size());
  const float one = 1.f;
  for (bool trans_a : {false, true}) {
    // A (n, 1) read as op(A): a column of n rows, stored as n rows of 1 (or one row of n, transposed)
    std::vector<float> out(static_cast<size_t>(n), -7.f);
    bf16_isa::widened()(trans_a, false, n, 1, 1, 1.f, values.data(), trans_a ? n : 1, &one, 1, 0.f, out.data(), 1,
                        nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const float want = bf16_to_f32(f32_to_bf16(values[static_cast<size_t>(i)]));
      if (std::isnan(want) || want == 0.f) {  // a sum that starts at +0 turns -0 into +0
        EXPECT_TRUE(std::isnan(want) ? std::isnan(out[static_cast<size_t>(i)]) : out[static_cast<size_t>(i)] == 0.f)
            << "value " << i;
        continue;
      }
      EXPECT_EQ(float_bits(out[static_cast<size_t>(i)]), float_bits(want))
          << "value " << i << " (bits " << std::hex << float_bits(values[static_cast<size_t>(i)]) << ")";
    }
  }
}

}  // namespace
}  // namespace qkv::kernels
