// ops::top_of_rows: each row's best entries with their ids, best first, ties to the smaller id, -inf
// and NaN never taken (a GPU search step's candidates; tests/cuda compares the GPU's with these).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TopOfRows, BestFirstTiesToTheSmallerIdNeverMinusInfinityOrNaN) {
  const std::vector<float> rows = {
      0.5f, 2.f,   -1.f,  2.f,   NAN,   7.f,  // row 0: 7 (5), 2 (1), 2 (3), 0.5 (0)
      -kInf, -kInf, 3.f,  -kInf, NAN,   -kInf,  // row 1: only 3 (2)
      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};  // row 2: nothing
  Tensor x = Tensor::empty(Dims{3, 6});
  std::copy(rows.begin(), rows.end(), x.f32());
  const auto [values, ids] = top_of_rows(x, 4);
  EXPECT_EQ(ids.to_ids(), (std::vector<int32_t>{5, 1, 3, 0, 2, -1, -1, -1, -1, -1, -1, -1}));
  const std::vector<float> v = values.to_vector();
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 5), (std::vector<float>{7.f, 2.f, 2.f, 0.5f, 3.f}));
  for (size_t i = 5; i < v.size(); ++i) EXPECT_EQ(v[i], -kInf) << i;
}

TEST(TopOfRows, RefusesACountOutsideItsRange) {
  const Tensor x = Tensor::zeros(Dims{2, 5});
  EXPECT_THROW((void)top_of_rows(x, 0), Error);
  EXPECT_THROW((void)top_of_rows(x, max_top_of_rows() + 1), Error);
  EXPECT_THROW((void)top_of_rows(Tensor::zeros(Dims{10}), 1), Error);
}

}  // namespace
}  // namespace qkv::ops
