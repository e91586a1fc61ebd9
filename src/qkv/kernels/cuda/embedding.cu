// Embedding lookup (f32 and bf16 tables) and its scatter-add backward (kernels/embedding.h) on
// device arrays, one block per looked-up row (grid-stride over rows, threads over its D columns).
//
// The forward checks the ids on the device, as the op layer checks them on the CPU: the smallest
// position n whose id lies outside [0, V) is gathered with atomicMin into a device int64 and copied
// back (the call waits for it). The functions return that POSITION n (not the id: the caller reads
// ids[n] itself for its message), or -1 when every id is valid. Rows of bad ids are left unwritten;
// every other row of out is written either way.
#include <algorithm>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

using detail::Scratch;

constexpr int kThreads = 128;

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535)); }

// A table element widened to float: f32 as is, bf16 exactly (its 16 bits are float32's top half).
__device__ inline float widen(float v) { return v; }
__device__ inline float widen(bfloat16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }

// out[n, :] = table[ids[n], :]; a bad id's position goes to *first_bad (atomicMin).
template <class T>
__global__ void embedding_forward_kernel(float* out, const T* table, const int32_t* ids, int64_t N, int64_t D,
                                         int64_t V, long long* first_bad) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t id = ids[n];
    if (id < 0 || id >= V) {
      if (threadIdx.x == 0) atomicMin(first_bad, static_cast<long long>(n));
      continue;
    }
    const T* row = table + id * D;
    float* dst = out + n * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dst[d] = widen(row[d]);
  }
}

// dtable[ids[n], :] += dout[n, :], skipping the rows of padding_idx (>= 0): nn.Embedding's
// padding_idx passes no gradient to its row (the CPU op zeroes those rows of dout instead; the same
// sums). Repeated ids meet in atomicAdd, so their order, and the last bits, vary from run to run.
__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids, int64_t N,
                                          int64_t D, int32_t padding_idx) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t id = ids[n];
    if (padding_idx >= 0 && id == padding_idx) continue;
    float* dst = dtable + static_cast<int64_t>(id) * D;
    const float* src = dout + n * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) atomicAdd(dst + d, src[d]);
  }
}

template <class T>
int64_t launch_forward(const char* name, float* out, const T* table, const int32_t* ids, int64_t N, int64_t D,
                       int64_t V) {
  if (N <= 0) return -1;
  cudaStream_t stream = qkv::cuda::current_stream();
  Scratch scratch(sizeof(long long), stream);
  long long* first_bad = static_cast<long long*>(scratch.as<void>());
  // Every byte 0x7f: 0x7f7f7f7f7f7f7f7f, above any position, means "no bad id".
  QKV_CUDA_CHECK(cudaMemsetAsync(first_bad, 0x7f, sizeof(long long), stream));
  embedding_forward_kernel<<<row_blocks(N), kThreads, 0, stream>>>(out, table, ids, N, D, V, first_bad);
  QKV_CUDA_CHECK_LAUNCH(name);
  long long bad = 0;
  QKV_CUDA_CHECK(cudaMemcpyAsync(&bad, first_bad, sizeof(long long), cudaMemcpyDeviceToHost, stream));
  scratch.release();
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  return bad < N ? static_cast<int64_t>(bad) : -1;
}

}  // namespace

int64_t embedding_forward(float* out, const float* table, const int32_t* ids, int64_t N, int64_t D, int64_t V) {
  return launch_forward("embedding_forward", out, table, ids, N, D, V);
}

int64_t embedding_forward_bf16(float* out, const bfloat16* table, const int32_t* ids, int64_t N, int64_t D,
                               int64_t V) {
  return launch_forward("embedding_forward_bf16", out, table, ids, N, D, V);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t D,
                        int32_t padding_idx) {
  if (N <= 0 || D <= 0) return;
  embedding_backward_kernel<<<row_blocks(N), kThreads, 0, qkv::cuda::current_stream()>>>(dtable, dout, ids, N, D,
                                                                                         padding_idx);
  QKV_CUDA_CHECK_LAUNCH("embedding_backward");
}

}  // namespace qkv::kernels::cuda
