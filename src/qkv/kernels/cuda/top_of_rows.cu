// Each row's highest scores on the GPU, so that a search step brings back k entries a row rather than
// the whole vocabulary (30 MB a step for 128 rows of 58,101). One block a row: each thread keeps the
// best k of its stride of the row in a sorted list, then the block merges the lists pairwise in shared
// memory.
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

constexpr unsigned kThreads = 128;
constexpr int kMax = kMaxTopOfRows;
constexpr int32_t kNoId = INT32_MAX;  // a free place: after every real entry

// (a, ia) goes before (b, ib): a higher score, or the same score and a smaller id.
__device__ inline bool before(float a, int32_t ia, float b, int32_t ib) { return a > b || (a == b && ia < ib); }

__global__ void top_of_rows_kernel(const float* x, int64_t V, int k, float* values, int32_t* ids) {
  __shared__ float list_value[kThreads][kMax];
  __shared__ int32_t list_id[kThreads][kMax];
  const float* row = x + blockIdx.x * V;
  float v[kMax];
  int32_t id[kMax];
  for (int j = 0; j < kMax; ++j) {
    v[j] = -INFINITY;
    id[j] = kNoId;
  }
  // Ids rise along a thread's stride, so an equal score later never goes before an earlier one.
  for (int64_t c = threadIdx.x; c < V; c += kThreads) {
    const float s = row[c];
    const auto i = static_cast<int32_t>(c);
    if (!(s > -INFINITY) || !before(s, i, v[k - 1], id[k - 1])) continue;  // -inf and NaN never taken
    int at = k - 1;
    for (; at > 0 && before(s, i, v[at - 1], id[at - 1]); --at) {
      v[at] = v[at - 1];
      id[at] = id[at - 1];
    }
    v[at] = s;
    id[at] = i;
  }
  for (int j = 0; j < k; ++j) {
    list_value[threadIdx.x][j] = v[j];
    list_id[threadIdx.x][j] = id[j];
  }
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {  // list t takes the best k of lists t and t + half
      const unsigned a = threadIdx.x, b = threadIdx.x + half;
      int ia = 0, ib = 0;
      for (int j = 0; j < k; ++j) {
        const bool from_a = before(list_value[a][ia], list_id[a][ia], list_value[b][ib], list_id[b][ib]);
        v[j] = from_a ? list_value[a][ia] : list_value[b][ib];
        id[j] = from_a ? list_id[a][ia] : list_id[b][ib];
        if (from_a) ++ia; else ++ib;
      }
    }
    __syncthreads();  // every list read before any is written
    if (threadIdx.x < half)
      for (int j = 0; j < k; ++j) {
        list_value[threadIdx.x][j] = v[j];
        list_id[threadIdx.x][j] = id[j];
      }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int j = 0; j < k; ++j) {
      const bool found = list_id[0][j] != kNoId;
      values[blockIdx.x * int64_t{k} + j] = found ? list_value[0][j] : -INFINITY;
      ids[blockIdx.x * int64_t{k} + j] = found ? list_id[0][j] : -1;
    }
}

}  // namespace

void top_of_rows(const float* x, int64_t N, int64_t V, int k, float* values, int32_t* ids) {
  QKV_CHECK(k >= 1 && k <= kMaxTopOfRows, "top_of_rows: k " << k << " outside [1, " << kMaxTopOfRows << "]");
  QKV_CHECK(V < INT32_MAX, "top_of_rows: rows of " << V << " entries");
  if (N <= 0) return;
  QKV_CHECK(N < (int64_t{1} << 31), "top_of_rows: " << N << " rows");
  top_of_rows_kernel<<<static_cast<unsigned>(N), kThreads, 0, qkv::cuda::current_stream()>>>(x, V, k, values, ids);
  QKV_CUDA_CHECK_LAUNCH("top_of_rows");
}

}  // namespace qkv::kernels::cuda
