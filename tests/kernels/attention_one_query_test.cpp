// The one-query path of attention_forward (a decoding step: Tq = 1, no dropout) against attention
// written out in double precision, with key padding and strided key/value rows (a cache whose
// capacity exceeds the keys in use), for head sizes with and without a tail past the 8 lanes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {
namespace {

TEST(AttentionOneQuery, EqualsDoublePrecisionAttentionWithPaddingAndStridedCache) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const int64_t dk : {64, 13}) {
    const int64_t B = 3, H = 2, Tk = 7, capacity = 10;
    AttentionDims d{B, H, 1, Tk, dk};
    std::vector<float> q(B * H * dk), k(B * H * capacity * dk), v(B * H * capacity * dk);
    for (float* p : {q.data(), k.data(), v.data()})
      for (size_t i = 0; i < (p == q.data() ? q.size() : k.size()); ++i) p[i] = normal(gen);
    std::vector<int32_t> keep(B * Tk, 1);
    keep[0 * Tk + 6] = keep[0 * Tk + 5] = 0;  // sentence 0: two padded keys
    keep[2 * Tk + 0] = 0;
    AttentionMask mask;
    mask.key_keep = keep.data();
    std::vector<float> out(B * H * dk), probs(B * H * Tk);
    const HeadsView qs{H * dk, dk, dk}, cache{H * capacity * dk, capacity * dk, dk}, os{H * dk, dk, dk};
    attention_forward(d, q.data(), qs, k.data(), cache, v.data(), cache, out.data(), os, probs.data(), mask, {}, nullptr, 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + b * qs.b + h * qs.h;
        const float* kh = k.data() + b * cache.b + h * cache.h;
        const float* vh = v.data() + b * cache.b + h * cache.h;
        std::vector<double> s(Tk);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          double dotp = 0;
          for (int64_t c = 0; c < dk; ++c) dotp += static_cast<double>(qh[c]) * kh[j * dk + c];
          s[j] = keep[b * Tk + j] ? dotp / std::sqrt(static_cast<double>(dk)) : -1e9;
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < Tk; ++j) {
          EXPECT_NEAR(probs[(b * H + h) * Tk + j], s[j] / sum, 1e-6) << "b " << b << " h " << h << " key " << j;
          if (!keep[b * Tk + j]) {
            EXPECT_EQ(probs[(b * H + h) * Tk + j], 0.f);
          }
        }
        for (int64_t c = 0; c < dk; ++c) {
          double o = 0;
          for (int64_t j = 0; j < Tk; ++j) o += s[j] / sum * vh[j * dk + c];
          EXPECT_NEAR(out[b * os.b + h * os.h + c], o, 1e-5) << "b " << b << " h " << h << " dim " << c << " dk " << dk;
        }
      }
  }
}

}  // namespace
}  // namespace qkv::kernels
