// KVCache::reorder works in place (beam search calls it every step): for every kind of row mapping
// (identity, swaps, cycles, duplicates, dropped rows, a growing batch) the decoded positions of each
// row equal a plain gather of the old rows, and positions past `length` are not needed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "qkv/nn/attention.h"

namespace qkv::nn {
namespace {

KVCache numbered_cache(int64_t N, int64_t H, int64_t capacity, int64_t dk, int64_t length) {
  KVCache c = KVCache::with_capacity(N, H, capacity, dk);
  for (int64_t i = 0; i < c.k.numel(); ++i) {
    c.k.f32()[i] = static_cast<float>(i);
    c.v.f32()[i] = static_cast<float>(-i);
  }
  c.length = length;
  return c;
}

void expect_gathered(const KVCache& after, const KVCache& before, const std::vector<int64_t>& rows, const std::string& what) {
  ASSERT_EQ(after.k.size(0), static_cast<int64_t>(rows.size())) << what;
  for (size_t i = 0; i < rows.size(); ++i)
    for (const auto& [a, b] : {std::pair{after.k, before.k}, std::pair{after.v, before.v}}) {
      const Tensor got = a.slice0(i, i + 1).narrow(2, 0, after.length).contiguous();
      const Tensor want = b.slice0(rows[i], rows[i] + 1).narrow(2, 0, after.length).contiguous();
      ASSERT_EQ(got.to_vector(), want.to_vector()) << what << ": row " << i << " should be old row " << rows[i];
    }
}

TEST(KVCacheReorder, EqualsAGatherOfTheOldRowsForEveryKindOfMapping) {
  const int64_t N = 8, H = 2, capacity = 6, dk = 3, length = 4;
  std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"identity", {0, 1, 2, 3, 4, 5, 6, 7}},
      {"swap", {1, 0, 2, 3, 4, 5, 6, 7}},
      {"cycle of 8", {7, 0, 1, 2, 3, 4, 5, 6}},
      {"two cycles", {1, 2, 0, 4, 5, 3, 7, 6}},
      {"beam duplicates", {0, 0, 1, 2, 5, 5, 5, 4}},
      {"drop finished rows", {4, 4, 5, 7}},
      {"drop and permute", {3, 2, 1, 0}},
      {"grow (expand to beams)", {0, 0, 0, 1, 1, 1, 2, 2, 2, 7, 7, 7}},
  };
  std::mt19937 gen(1);
  for (int r = 0; r < 50; ++r) {  // random mappings of random sizes
    std::vector<int64_t> rows(1 + gen() % N);
    for (int64_t& x : rows) x = static_cast<int64_t>(gen() % N);
    cases.push_back({"random " + std::to_string(r), rows});
  }
  for (const auto& [what, rows] : cases) {
    const KVCache before = numbered_cache(N, H, capacity, dk, length);
    KVCache after = numbered_cache(N, H, capacity, dk, length);
    after.reorder(rows);
    expect_gathered(after, before, rows, what);
  }
  // Twice in a row on a narrowed cache (rows dropped, then reordered again).
  KVCache c = numbered_cache(N, H, capacity, dk, length);
  const KVCache before = numbered_cache(N, H, capacity, dk, length);
  c.reorder({6, 5, 4, 3});
  c.reorder({1, 0, 0});
  expect_gathered(c, before, {5, 6, 6}, "drop then reorder");
  EXPECT_THROW(c.reorder({0, 3}), Error);  // row 3 no longer exists
}

}  // namespace
}  // namespace qkv::nn
