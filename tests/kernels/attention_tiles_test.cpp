// attention_forward's tiled inference path (kernels/attention_tiles.h: more than 8 queries, at most
// 128 keys, dk a multiple of 8) against attention written out in double precision, with every mask
// the kernel knows (padded keys, causal, dropped queries), strided rows, key counts on and off the
// 8-key vectors and query counts on and off the 4-query tiles; and a row's result independent of
// the rows it shares a tile with.
#include "qkv/kernels/attention_tiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {
namespace {

struct Case {
  int64_t dk, Tq, Tk;
  bool causal, drop_queries;
};

struct Heads {
  AttentionDims d;
  int64_t capacity;  // key rows allocated per head (> Tk: a strided cache)
  std::vector<float> q, k, v;
  std::vector<int32_t> key_keep, query_keep;
};

Heads random_heads(const Case& c, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.f, 1.5f);
  Heads x{{3, 2, c.Tq, c.Tk, c.dk}, c.Tk + 2, {}, {}, {}, {}, {}};
  x.q.resize(x.d.B * x.d.H * c.Tq * c.dk);
  x.k.resize(x.d.B * x.d.H * x.capacity * c.dk);
  x.v.resize(x.k.size());
  for (std::vector<float>* p : {&x.q, &x.k, &x.v})
    for (float& f : *p) f = normal(gen);
  x.key_keep.assign(x.d.B * c.Tk, 1);
  if (c.Tk > 2) x.key_keep[0 * c.Tk + c.Tk - 1] = x.key_keep[0 * c.Tk + 1] = 0;
  if (c.Tk > 1) x.key_keep[2 * c.Tk + 0] = 0;
  x.query_keep.assign(x.d.B * c.Tq, 1);
  if (c.drop_queries) x.query_keep[1 * c.Tq + c.Tq - 2] = x.query_keep[2 * c.Tq + 3] = 0;
  return x;
}

struct Result {
  std::vector<float> out, probs;
};

Result run(const Heads& x, bool causal, bool drop_queries) {
  const AttentionDims& d = x.d;
  AttentionMask mask;
  mask.key_keep = x.key_keep.data();
  mask.query_keep = drop_queries ? x.query_keep.data() : nullptr;
  mask.causal = causal;
  Result r{std::vector<float>(d.B * d.H * d.Tq * d.dk), std::vector<float>(d.B * d.H * d.Tq * d.Tk)};
  const HeadsView qs{d.H * d.Tq * d.dk, d.Tq * d.dk, d.dk}, cache{d.H * x.capacity * d.dk, x.capacity * d.dk, d.dk};
  attention_forward(d, x.q.data(), qs, x.k.data(), cache, x.v.data(), cache, r.out.data(), qs, r.probs.data(), mask, {},
                    nullptr, 1, true);
  return r;
}

TEST(AttentionTiles, EqualDoublePrecisionAttentionWithEveryMask) {
  std::mt19937 gen(11);
  const Case cases[] = {{32, 40, 40, false, false}, {32, 9, 1, false, false}, {8, 13, 8, true, false},
                        {64, 12, 9, false, true},   {24, 10, 17, true, true}, {128, 21, 128, false, false},
                        {256, 9, 33, true, false},  {16, 64, 64, true, true}, {40, 11, 100, false, true}};
  for (const Case& c : cases) {
    ASSERT_TRUE(tiles::supports({3, 2, c.Tq, c.Tk, c.dk}));
    const Heads x = random_heads(c, gen);
    const AttentionDims& d = x.d;
    const Result r = run(x, c.causal, c.drop_queries);
    const HeadsView cache{d.H * x.capacity * d.dk, x.capacity * d.dk, d.dk};
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t i = 0; i < d.Tq; ++i) {
          const float* q = x.q.data() + ((b * d.H + h) * d.Tq + i) * d.dk;
          const float* k = x.k.data() + b * cache.b + h * cache.h;
          const float* v = x.v.data() + b * cache.b + h * cache.h;
          const bool dropped = c.drop_queries && x.query_keep[b * d.Tq + i] == 0;
          std::vector<double> s(d.Tk);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < d.Tk; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < d.dk; ++e) dot += static_cast<double>(q[e]) * k[j * d.dk + e];
            const bool masked = dropped || !x.key_keep[b * d.Tk + j] || (c.causal && j > i + (d.Tk - d.Tq));
            s[j] = masked ? -1e9 : dot / std::sqrt(static_cast<double>(d.dk));
            mx = std::max(mx, s[j]);
          }
          for (double& e : s) sum += (e = std::exp(e - mx));
          const std::string where = "dk " + std::to_string(d.dk) + " Tq " + std::to_string(d.Tq) + " Tk " +
                                    std::to_string(d.Tk) + " b " + std::to_string(b) + " h " + std::to_string(h) +
                                    " query " + std::to_string(i);
          const float* probs = r.probs.data() + ((b * d.H + h) * d.Tq + i) * d.Tk;
          for (int64_t j = 0; j < d.Tk; ++j) EXPECT_NEAR(probs[j], s[j] / sum, 1e-6) << where << " key " << j;
          for (int64_t e = 0; e < d.dk; ++e) {
            double o = 0;
            for (int64_t j = 0; j < d.Tk; ++j) o += s[j] / sum * v[j * d.dk + e];
            EXPECT_NEAR(r.out[((b * d.H + h) * d.Tq + i) * d.dk + e], o, 2e-5) << where << " dim " << e;
          }
        }
  }
}

// The first 9 queries of a head alone (tiles 4 + 4 + 1) and among 14 (4 + 4 + 4 + 2): the same bits.
TEST(AttentionTiles, RowsDoNotDependOnTheirTile) {
  std::mt19937 gen(12);
  Heads all = random_heads({32, 14, 23, false, false}, gen);
  Heads first = all;
  first.d.Tq = 9;
  first.q.clear();
  for (int64_t bh = 0; bh < all.d.B * all.d.H; ++bh)
    first.q.insert(first.q.end(), all.q.begin() + bh * 14 * 32, all.q.begin() + (bh * 14 + 9) * 32);
  const Result a = run(all, false, false), f = run(first, false, false);
  for (int64_t bh = 0; bh < all.d.B * all.d.H; ++bh)
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t e = 0; e < 32; ++e)
        ASSERT_EQ(a.out[(bh * 14 + i) * 32 + e], f.out[(bh * 9 + i) * 32 + e]) << "head " << bh << " query " << i;
      for (int64_t j = 0; j < 23; ++j)
        ASSERT_EQ(a.probs[(bh * 14 + i) * 23 + j], f.probs[(bh * 9 + i) * 23 + j]) << "head " << bh << " query " << i;
    }
}

// Inference that keeps no softmax passes probs null: every path (a few queries, tiles, BLAS past 128
// keys) gives the output it gives with probs.
TEST(AttentionWithoutProbs, EveryInferencePathGivesTheSameOutput) {
  std::mt19937 gen(13);
  for (const Case& c : {Case{32, 3, 20, true, false}, Case{32, 20, 20, false, true}, Case{16, 12, 130, true, false}}) {
    const Heads x = random_heads(c, gen);
    const AttentionDims& d = x.d;
    AttentionMask mask;
    mask.key_keep = x.key_keep.data();
    mask.query_keep = c.drop_queries ? x.query_keep.data() : nullptr;
    mask.causal = c.causal;
    const HeadsView qs{d.H * d.Tq * d.dk, d.Tq * d.dk, d.dk}, cache{d.H * x.capacity * d.dk, x.capacity * d.dk, d.dk};
    std::vector<float> out(d.B * d.H * d.Tq * d.dk), bare(out.size()), probs(d.B * d.H * d.Tq * d.Tk);
    attention_forward(d, x.q.data(), qs, x.k.data(), cache, x.v.data(), cache, out.data(), qs, probs.data(), mask, {},
                      nullptr, 1, true);
    attention_forward(d, x.q.data(), qs, x.k.data(), cache, x.v.data(), cache, bare.data(), qs, nullptr, mask, {},
                      nullptr, 1, true);
    EXPECT_EQ(out, bare) << "dk " << c.dk << " Tq " << c.Tq << " Tk " << c.Tk;
  }
}

TEST(AttentionTiles, TakesOnlyHeadsItCovers) {
  EXPECT_TRUE(tiles::supports({1, 1, 20, 128, 64}));
  EXPECT_FALSE(tiles::supports({1, 1, 20, 129, 64}));  // BLAS past 128 keys
  EXPECT_FALSE(tiles::supports({1, 1, 20, 20, 13}));   // dk off the 8 lanes: per-query path
  EXPECT_FALSE(tiles::supports({1, 1, 20, 20, 264}));
  EXPECT_FALSE(tiles::supports({1, 1, 20, 0, 64}));
}

}  // namespace
}  // namespace qkv::kernels
