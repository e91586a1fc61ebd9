// ops::gather_rows and ops::gather_cache_rows on the CPU (beam search's reordering of sources,
// encoder outputs and key/value caches): each element checked against its place in the input;
// tests/cuda compares the GPU's one-launch gathers with these.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error_message.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

// x[i...] = i * 1000 + the element's offset within its row: a value names its row and place.
Tensor numbered(const Dims& shape) {
  Tensor x = Tensor::empty(shape);
  const int64_t row = x.numel() / shape[0];
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i / row * 1000 + i % row);
  return x;
}

TEST(GatherRows, EachRowComesFromTheRowItNames) {
  const Tensor x = numbered(Dims{4, 3, 5});
  const std::vector<int64_t> rows = {3, 0, 3, 2, 1, 1};  // repeats, every row, more rows than in
  const Tensor g = gather_rows(x, rows);
  ASSERT_EQ(g.shape(), (Dims{6, 3, 5}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t e = 0; e < 15; ++e)
      ASSERT_EQ(g.f32()[i * 15 + e], static_cast<float>(rows[static_cast<size_t>(i)] * 1000 + e)) << i << ", " << e;
  EXPECT_EQ(gather_rows(x, {}).size(0), 0);
}

TEST(GatherCacheRows, TheFirstPositionsOfEachHeadComeFromTheRowItNames) {
  const int64_t H = 2, capacity = 6, dk = 3, length = 4;
  const Tensor cache = numbered(Dims{5, H, capacity, dk});
  const std::vector<int64_t> rows = {4, 4, 0, 2};
  const Tensor g = gather_cache_rows(cache, rows, length);
  ASSERT_EQ(g.shape(), (Dims{4, H, capacity, dk}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < length; ++p)
        for (int64_t d = 0; d < dk; ++d) {
          const int64_t within = (h * capacity + p) * dk + d;
          const float want = static_cast<float>(rows[static_cast<size_t>(i)] * 1000 + within);
          ASSERT_EQ(g.f32()[i * H * capacity * dk + within], want) << "row " << i << ", head " << h << ", position " << p;
        }
}

TEST(GatherCacheRows, RefusesBadRowsLengthsAndShapesNamingThem) {
  const Tensor cache = numbered(Dims{3, 2, 4, 2});
  const auto message = [&](auto&& call) { return test_support::error_message_of(call, "(no error)"); };
  EXPECT_NE(message([&] { gather_cache_rows(cache, {0, 3}, 2); }).find("row 3 outside [0, 3)"), std::string::npos);
  EXPECT_NE(message([&] { gather_cache_rows(cache, {0}, 5); }).find("length 5 past capacity 4"), std::string::npos);
  EXPECT_NE(message([&] { gather_cache_rows(numbered(Dims{3, 8}), {0}, 1); }).find("(N, H, capacity, dk)"),
            std::string::npos);
  EXPECT_NE(message([&] { gather_rows(cache, {-1}); }).find("row -1 outside"), std::string::npos);
}

}  // namespace
}  // namespace qkv::ops
