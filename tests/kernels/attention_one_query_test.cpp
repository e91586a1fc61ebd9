// attention_forward's inference paths against attention written out in double precision, with key
// padding, a causal mask, and strided key/value rows (a cache whose capacity exceeds the keys in
// use), for head sizes with and without a tail past the 8 lanes: the direct path of a few queries (a
// decoding step: one query per head, or the beams of a sentence reading its encoder output) or of a
// short sequence (a sentence being embedded: 40 queries and keys), and BLAS with the vectorised
// softmax past 128 keys. The softmax rows are also compared with the scalar one of training.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/kernels/attention.h"
#include "qkv/kernels/softmax.h"
#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {
namespace {

TEST(AttentionFewQueries, EqualDoublePrecisionAttentionWithPaddingAndStridedCache) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  // dk 64 and 32 take the register-blocked path (8 keys at a time: Tk 19 has two blocks and a tail).
  for (const auto& [dk, Tq, causal, Tk] :
       {std::tuple{int64_t{64}, int64_t{1}, false, int64_t{7}}, std::tuple{int64_t{13}, int64_t{1}, false, int64_t{7}},
        std::tuple{int64_t{64}, int64_t{4}, false, int64_t{7}}, std::tuple{int64_t{13}, int64_t{3}, true, int64_t{7}},
        std::tuple{int64_t{64}, int64_t{1}, false, int64_t{19}}, std::tuple{int64_t{32}, int64_t{3}, true, int64_t{19}},
        std::tuple{int64_t{32}, int64_t{1}, false, int64_t{16}}, std::tuple{int64_t{64}, int64_t{8}, true, int64_t{24}},
        std::tuple{int64_t{32}, int64_t{40}, false, int64_t{40}}, std::tuple{int64_t{64}, int64_t{37}, true, int64_t{37}},
        std::tuple{int64_t{64}, int64_t{20}, false, int64_t{130}}}) {
    const int64_t B = 3, H = 2, capacity = Tk + 3;
    AttentionDims d{B, H, Tq, Tk, dk};
    std::vector<float> q(B * H * Tq * dk), k(B * H * capacity * dk), v(B * H * capacity * dk);
    for (std::vector<float>* p : {&q, &k, &v})
      for (float& x : *p) x = normal(gen);
    std::vector<int32_t> keep(B * Tk, 1);
    keep[0 * Tk + 6] = keep[0 * Tk + 5] = 0;  // sentence 0: two padded keys
    keep[2 * Tk + 0] = 0;
    AttentionMask mask;
    mask.key_keep = keep.data();
    mask.causal = causal;
    std::vector<float> out(B * H * Tq * dk), probs(B * H * Tq * Tk);
    const HeadsView qs{H * Tq * dk, Tq * dk, dk}, cache{H * capacity * dk, capacity * dk, dk}, os{H * Tq * dk, Tq * dk, dk};
    attention_forward(d, q.data(), qs, k.data(), cache, v.data(), cache, out.data(), os, probs.data(), mask, {}, nullptr, 1, true);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
          const float* qh = q.data() + b * qs.b + h * qs.h + i * qs.t;
          const float* kh = k.data() + b * cache.b + h * cache.h;
          const float* vh = v.data() + b * cache.b + h * cache.h;
          std::vector<double> s(Tk);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < Tk; ++j) {
            double dotp = 0;
            for (int64_t c = 0; c < dk; ++c) dotp += static_cast<double>(qh[c]) * kh[j * dk + c];
            const bool masked = !keep[b * Tk + j] || (causal && j > i + (Tk - Tq));
            s[j] = masked ? -1e9 : dotp / std::sqrt(static_cast<double>(dk));
            mx = std::max(mx, s[j]);
          }
          for (double& x : s) sum += (x = std::exp(x - mx));
          const std::string where = "b " + std::to_string(b) + " h " + std::to_string(h) + " query " + std::to_string(i) +
                                    " dk " + std::to_string(dk);
          for (int64_t j = 0; j < Tk; ++j) EXPECT_NEAR(probs[((b * H + h) * Tq + i) * Tk + j], s[j] / sum, 1e-6) << where << " key " << j;
          for (int64_t c = 0; c < dk; ++c) {
            double o = 0;
            for (int64_t j = 0; j < Tk; ++j) o += s[j] / sum * vh[j * dk + c];
            EXPECT_NEAR(out[b * os.b + h * os.h + i * os.t + c], o, 1e-5) << where << " dim " << c;
          }
        }
  }
}

// softmax_row against a double-precision softmax on rows with every tail of the 8 lanes, masked
// entries (-1e9) and a large spread: within a few ulp of each probability (plus the rounding of
// x - max, which any float softmax has).
TEST(SoftmaxRow, AgreesWithDoublePrecisionWithinAFewUlp) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.f, 4.f);
  for (int64_t C : {1, 2, 7, 8, 9, 16, 33, 130, 1000}) {
    std::vector<float> row(C);
    for (float& x : row) x = normal(gen);
    if (C > 2) row[1] = -1e9f;
    double mx = row[0], sum = 0;
    for (float x : row) mx = std::max(mx, static_cast<double>(x));
    for (float x : row) sum += std::exp(x - mx);
    std::vector<float> y = row;
    softmax_row(y.data(), C);
    double total = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double expected = std::exp(row[c] - mx) / sum;
      // x - max is rounded to float first (half an ulp of a value up to |x - max|, which exp turns
      // into a relative error of that size), then exp (1.2 ulp), the sum and the scaling.
      const double eps = std::numeric_limits<float>::epsilon();
      const double tolerance = expected * (4 * eps + 0.5 * eps * std::fabs(row[c] - mx)) + 1e-30;
      EXPECT_NEAR(y[c], expected, tolerance) << "C " << C << " column " << c;
      total += y[c];
    }
    EXPECT_NEAR(total, 1.0, 1e-6) << "C " << C;
    if (C > 2) {
      EXPECT_EQ(y[1], 0.f) << "a masked entry gets no weight";
    }
  }
}

// softmax_row skips the exp of masked scores (exp_or_zero on the 8 lanes, a compare before std::exp
// in the tail) in rows it finds masked: the bits must be those of computing every exp, for masks at
// either end, in the middle only, all but one, and scores just above and below exp's zero (-104).
TEST(SoftmaxRow, MaskedScoresGiveTheBitsOfComputingEveryExp) {
  const auto plain_softmax = [](std::vector<float> row) {  // the rule: every exp computed
    const auto C = static_cast<int64_t>(row.size());
    __m256 m = simd::splat(-std::numeric_limits<float>::infinity());
    int64_t c = 0;
    for (; c + 8 <= C; c += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row.data() + c));
    float mx = simd::max_lanes(m);
    for (; c < C; ++c) mx = row[c] > mx ? row[c] : mx;
    __m256 sum8 = _mm256_setzero_ps();
    for (c = 0; c + 8 <= C; c += 8) {
      const __m256 e = simd::exp(_mm256_sub_ps(_mm256_loadu_ps(row.data() + c), simd::splat(mx)));
      _mm256_storeu_ps(row.data() + c, e);
      sum8 = _mm256_add_ps(sum8, e);
    }
    float sum = simd::sum_lanes(sum8);
    for (; c < C; ++c) sum += row[c] = std::exp(row[c] - mx);
    for (float& x : row) x *= 1.f / sum;
    return row;
  };
  std::mt19937 gen(6);
  std::normal_distribution<float> normal(0.f, 3.f);
  const float low_values[] = {-1e9f, -std::numeric_limits<float>::infinity(), -200.f, -104.5f, -103.9f, -90.f};
  for (int64_t C : {1, 3, 8, 9, 15, 36, 37, 64, 100}) {
    for (int pattern = 0; pattern < 5; ++pattern) {
      for (float low : low_values) {
        std::vector<float> row(C);
        for (float& x : row) x = normal(gen);
        for (int64_t c = 0; c < C; ++c) {
          const bool masked = pattern == 0   ? c >= C / 2               // padding: the end
                              : pattern == 1 ? c < C / 3                // left padding: the start
                              : pattern == 2 ? c % 5 == 2 && c != 0     // the middle only
                              : pattern == 3 ? c != C / 2               // all but one
                                             : c > C / 2;               // the end, the first at -1e9 (below)
          if (masked) row[c] = row[C / 2] + low;
        }
        if (pattern == 4 && C > 2) row[0] = -1e9f;  // the row is found masked, whatever low is
        std::vector<float> y = row;
        softmax_row(y.data(), C);
        const std::vector<float> want = plain_softmax(row);
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(std::bit_cast<uint32_t>(y[c]), std::bit_cast<uint32_t>(want[c]))
              << "C " << C << " pattern " << pattern << " low " << low << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace qkv::kernels
