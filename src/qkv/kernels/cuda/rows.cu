// Rows gathered by a list of row ids in one launch (beam search's reordering of key/value caches,
// ops::gather_rows): one copy per row would be a launch per row, per layer and per step (1,536 a
// step for beam 4 x 32 sentences of a 6-layer decoder).
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

// The row ids of one launch ride in its kernel arguments (2 KB), so nothing is copied to the device
// and nothing waits for it.
constexpr int kRowsALaunch = 512;
struct RowList {
  int64_t first;  // the output row of row[0]
  int32_t count;
  int32_t row[kRowsALaunch];
};

// Block b copies segment (b / segments, b % segments) of the launch's rows: `count` elements at the
// segment's start, segments `stride` elements apart in a row.
template <class T>
__global__ void copy_rows_kernel(T* out, const T* in, RowList rows, int64_t segments, int64_t stride, int64_t count) {
  for (int64_t b = blockIdx.x; b < rows.count * segments; b += gridDim.x) {
    const int64_t i = b / segments, s = b % segments;
    const int64_t row_size = segments * stride;
    const T* from = in + rows.row[i] * row_size + s * stride;
    T* to = out + (rows.first + i) * row_size + s * stride;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) to[e] = from[e];
  }
}

template <class T>
void launch(void* out, const void* in, const int64_t* rows, int64_t n, int64_t segments, int64_t stride,
            int64_t count) {
  for (int64_t first = 0; first < n; first += kRowsALaunch) {
    RowList list{};
    list.first = first;
    list.count = static_cast<int32_t>(std::min<int64_t>(kRowsALaunch, n - first));
    for (int32_t i = 0; i < list.count; ++i) list.row[i] = static_cast<int32_t>(rows[first + i]);
    const int64_t blocks = std::min<int64_t>(int64_t{list.count} * segments, int64_t{1} << 16);
    const unsigned threads = count >= 256 ? 256 : count >= 64 ? 128 : 32;
    copy_rows_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, qkv::cuda::current_stream()>>>(
        static_cast<T*>(out), static_cast<const T*>(in), list, segments, stride, count);
    QKV_CUDA_CHECK_LAUNCH("copy_rows");
  }
}

}  // namespace

void copy_rows(void* out, const void* in, const int64_t* rows, int64_t n, int64_t segments, int64_t stride,
               int64_t count, int64_t element_size) {
  if (n <= 0 || segments <= 0 || count <= 0) return;
  switch (element_size) {
    case 1: return launch<uint8_t>(out, in, rows, n, segments, stride, count);
    case 2: return launch<uint16_t>(out, in, rows, n, segments, stride, count);
    case 4: return launch<uint32_t>(out, in, rows, n, segments, stride, count);
    case 8: return launch<uint64_t>(out, in, rows, n, segments, stride, count);
    default: QKV_CHECK(false, "copy_rows: elements of " << element_size << " bytes");
  }
}

}  // namespace qkv::kernels::cuda
