// KVCache::reorder moves a map of rows, reorder_copying (static caches) copies rows in place: for
// every kind of row mapping (identity, swaps, cycles, duplicates, dropped rows, a growing batch) each
// sequence's positions, gathered into place, equal a plain gather of the old rows. And attention
// through a mapped cache, step after step, gives the bits of attention over rows copied into place.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "qkv/autograd/graph.h"
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
    KVCache copied = numbered_cache(N, H, capacity, dk, length);
    copied.reorder_copying(rows);
    expect_gathered(copied, before, rows, what + " (copying)");
    KVCache mapped = numbered_cache(N, H, capacity, dk, length);
    mapped.reorder(rows);
    ASSERT_EQ(mapped.sequences(), static_cast<int64_t>(rows.size())) << what;
    mapped.gather_in_place();
    expect_gathered(mapped, before, rows, what + " (map)");
  }
  // Twice in a row on a narrowed cache (rows dropped, then reordered again).
  for (const bool by_map : {false, true}) {
    KVCache c = numbered_cache(N, H, capacity, dk, length);
    const KVCache before = numbered_cache(N, H, capacity, dk, length);
    const auto reorder = [&](const std::vector<int64_t>& rows) { by_map ? c.reorder(rows) : c.reorder_copying(rows); };
    reorder({6, 5, 4, 3});
    reorder({1, 0, 0});
    EXPECT_THROW(reorder({0, 3}), Error);  // sequence 3 no longer exists
    c.gather_in_place();
    expect_gathered(c, before, {5, 6, 6}, by_map ? "drop then reorder (map)" : "drop then reorder (copying)");
  }
}

// Beam search's use: a step of self-attention, a reordering (beams swapped, duplicated, sentences
// dropped, the batch grown, most sequences ended), a step, ... The cache whose rows move by a map must give the output
// and attention weights of the cache whose rows are copied, bit for bit, and positions written
// after a reordering must not disturb what the map still points at.
TEST(KVCacheReorder, AttentionThroughTheMapEqualsAttentionOverCopiedRows) {
  NoGradGuard no_grad;
  // dk 32, 64 and 24 (the kernel's generic path)
  for (const auto& [d_model, heads] : {std::pair<int64_t, int64_t>{64, 2}, {128, 2}, {96, 4}}) {
    Generator gen(7);
    MultiHeadAttention attn(d_model, heads, gen);
    attn.eval();
    const int64_t capacity = 12;
    KVCache copied = KVCache::with_capacity(6, attn.num_heads(), capacity, d_model / attn.num_heads());
    KVCache mapped = KVCache::with_capacity(6, attn.num_heads(), capacity, d_model / attn.num_heads());
    const std::vector<std::vector<int64_t>> reorders = {
        {0, 0, 1, 3, 3, 5}, {5, 4, 3, 2, 1, 0}, {1, 1, 1, 4}, {0, 0, 1, 1, 2, 2, 3, 3}, {7, 6, 0, 2, 2},
        {4, 3, 2, 1, 0},   {2, 2, 0}};
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (size_t step = 0; step <= reorders.size(); ++step) {
      const int64_t n = copied.k.size(0), T = step == 3 ? 2 : 1;  // step 3 appends two positions at once
      Tensor x = Tensor::empty(Dims{n, T, d_model});
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
      Tensor w_copied, w_mapped;
      const Tensor want = attn.forward_cached(Var(x), copied, {}, &w_copied).value();
      const Tensor got = attn.forward_cached(Var(x), mapped, {}, &w_mapped).value();
      const std::string at = "d_model " + std::to_string(d_model) + ", step " + std::to_string(step);
      ASSERT_EQ(got.to_vector(), want.to_vector()) << at;
      ASSERT_EQ(w_mapped.to_vector(), w_copied.to_vector()) << at;
      if (step == reorders.size()) break;
      copied.reorder_copying(reorders[step]);
      mapped.reorder(reorders[step]);
      if (step + 1 < reorders.size()) {
        EXPECT_TRUE(mapped.key_rows.defined()) << at;
      }
    }
    // The last reordering keeps 3 sequences of 8 rows: at half or less, the cache gathers them
    // into storage of their own and lets the rows of the ended ones go.
    EXPECT_FALSE(mapped.key_rows.defined());
    EXPECT_EQ(mapped.k.size(0), 3);
  }
}

// CausalLM::append re-slices a join()ed state's reserved storage after keep_rows moved its rows:
// reorder_copying must leave k and v in the storage they had unless the batch grows.
TEST(KVCacheReorder, CopyingKeepsTheStorageUnlessTheBatchGrows) {
  for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{3, 2, 1, 0}, {2, 2}, {1, 0, 3, 2}}) {
    KVCache c = numbered_cache(4, 2, 5, 3, 4);
    const void* k_storage = c.k.raw_data();
    const void* v_storage = c.v.raw_data();
    c.reorder_copying(rows);
    EXPECT_EQ(c.k.raw_data(), k_storage);
    EXPECT_EQ(c.v.raw_data(), v_storage);
    c.reorder_gathering({0});  // on the CPU, the same copies in place
    EXPECT_EQ(c.k.raw_data(), k_storage);
  }
  KVCache grown = numbered_cache(2, 2, 5, 3, 4);
  const KVCache before = numbered_cache(2, 2, 5, 3, 4);
  grown.reorder_copying({0, 0, 1, 1, 1});
  expect_gathered(grown, before, {0, 0, 1, 1, 1}, "grown");
}

TEST(KVCacheReorder, ManyNewPositionsGatherTheMappedRowsFirst) {
  NoGradGuard no_grad;
  Generator gen(11);
  MultiHeadAttention attn(64, 2, gen);
  attn.eval();
  KVCache copied = KVCache::with_capacity(3, 2, 32, 32), mapped = KVCache::with_capacity(3, 2, 32, 32);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const auto random_x = [&](int64_t n, int64_t T) {
    Tensor x = Tensor::empty(Dims{n, T, 64});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
    return x;
  };
  const Tensor x0 = random_x(3, 2);
  attn.forward_cached(Var(x0), copied, {});
  attn.forward_cached(Var(x0), mapped, {});
  copied.reorder_copying({2, 0, 0});
  mapped.reorder({2, 0, 0});
  ops::AttentionMasks causal;
  causal.causal = true;
  const Tensor x1 = random_x(3, 12);  // past the mapped kernel's 8 queries: gathered into place first
  const Tensor want = attn.forward_cached(Var(x1), copied, causal).value();
  const Tensor got = attn.forward_cached(Var(x1), mapped, causal).value();
  EXPECT_FALSE(mapped.key_rows.defined());
  EXPECT_EQ(got.to_vector(), want.to_vector());
  EXPECT_THROW(attn.forward_cached(Var(random_x(2, 1)), mapped, {}), Error);  // 2 sequences for a cache of 3
}

}  // namespace
}  // namespace qkv::nn

namespace qkv {
namespace {

TEST(KVCacheStorage, BatchAfterBatchWritesIntoTheSameStorageAndGrowsOnlyForMoreRows) {
  nn::KVCacheStorage storage;
  const int64_t H = 2, dk = 8, capacity = 40;
  const nn::KVCache first = storage.take(0, 6, H, 12, capacity, dk);
  EXPECT_TRUE(first.kept_storage);
  EXPECT_EQ(first.k.shape(), (Dims{6, H, capacity, dk})) << "the storage's capacity, not the batch's limit";
  const float* k0 = first.k.f32();
  const float* v0 = first.v.f32();
  {
    const nn::KVCache longer = storage.take(0, 4, H, capacity, capacity, dk);  // fewer rows, the whole capacity
    EXPECT_EQ(longer.k.f32(), k0);
    EXPECT_EQ(longer.v.f32(), v0);
    EXPECT_EQ(longer.k.size(0), 4);
  }
  const nn::KVCache other_layer = storage.take(1, 6, H, 12, capacity, dk);
  EXPECT_NE(other_layer.k.f32(), k0) << "each layer has storage of its own";
  const nn::KVCache more_rows = storage.take(0, 9, H, 12, capacity, dk);
  EXPECT_NE(more_rows.k.f32(), k0);
  EXPECT_EQ(more_rows.k.size(0), 9);
  EXPECT_EQ(storage.take(0, 9, H, 5, capacity, dk).k.f32(), more_rows.k.f32()) << "kept after growing";
  EXPECT_THROW(storage.take(0, 2, H, capacity + 1, capacity, dk), Error);
  EXPECT_THROW(storage.take(0, 2, H, 0, capacity, dk), Error);
}

TEST(KVCacheStorage, ReorderKeepsTheStorageWhereAnOwnCacheGathersIntoLessMemory) {
  nn::KVCacheStorage storage;
  for (const bool kept : {false, true}) {
    nn::KVCache c = kept ? storage.take(0, 8, 2, 6, 10, 4) : nn::KVCache::with_capacity(8, 2, 10, 4);
    c.k.fill(1.f);
    c.v.fill(2.f);
    c.length = 3;
    const float* before = c.k.f32();
    c.reorder({5, 5, 1, 0});  // half the rows: an own cache gives the other half back
    EXPECT_EQ(c.k.f32() == before, kept);
    EXPECT_EQ(c.k.size(0), kept ? 8 : 4);
    EXPECT_EQ(c.sequences(), 4);
  }
}

}  // namespace
}  // namespace qkv
