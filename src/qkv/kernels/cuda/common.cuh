// What the CUDA kernel files share: stream-ordered scratch memory and block-wide reductions.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "qkv/core/buffer_pool.h"
#include "qkv/core/cuda_check.h"
#include "qkv/core/device.h"

namespace qkv::kernels::cuda::detail {

// Stream-ordered device scratch: release() frees it on the normal path (checked); the destructor
// frees it unchecked only when an exception left it held. Out of memory, the tensor pool's idle
// buffers go back to the device and the allocation is tried once more (the pool's own misses free
// this allocator's cache likewise: cuda::malloc); the memory planner does not count scratch, such
// as a bf16 product's rounded operands.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (cudaMallocAsync(&p_, bytes, stream_) == cudaSuccess) return;
    (void)cudaGetLastError();
    int device = 0;
    QKV_CUDA_CHECK(cudaGetDevice(&device));
    BufferPool::trim(Device::cuda(device));
    const cudaError_t again = cudaMallocAsync(&p_, bytes, stream_);
    if (again == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError("out of memory on cuda:" + std::to_string(device) + ": a kernel's scratch of " +
                             std::to_string(bytes >> 20) + " MiB (a smaller batch needs less)");
    }
    QKV_CUDA_CHECK(again);
  }
  ~Scratch() {
    if (p_) (void)cudaFreeAsync(p_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void release() {
    void* p = p_;
    p_ = nullptr;
    QKV_CUDA_CHECK(cudaFreeAsync(p, stream_));
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

// Row kernels give each row of a matrix to blockDim.x threads (blockDim.y rows a block,
// grid-stride over them), so that a row's place costs one division, not one per element (a
// 64-bit division is dozens of instructions on a GPU), and the columns are read coalesced.
struct RowGrid {
  dim3 grid, block;
};
inline RowGrid row_grid(int64_t total_rows, int64_t cols) {
  unsigned x = 32;  // threads along a row: up to 128, fewer for narrow rows (an attention head's 64)
  while (x < 128 && 2 * int64_t{x} < cols) x *= 2;
  const unsigned y = 256 / x;
  const int64_t blocks = (total_rows + y - 1) / y;
  return {dim3(static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 20))), dim3(x, y)};
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
// fmaxf skips NaN: where a NaN must show, a sum that takes it along makes it do so.
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread of the block gets op over every thread's v (blockDim.x a multiple of 32). All threads
// must call it. The warps' partials are combined in warp order, the same in every thread.
template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[32];
  v = warp_reduce(v, op);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int warps = static_cast<int>(blockDim.x >> 5);
  __syncthreads();  // an earlier call's readers of `partial` are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = partial[0];
  for (int w = 1; w < warps; ++w) r = op(r, partial[w]);
  return r;
}

// A sum with another order than block_reduce's: each warp's total, then the warp totals added by
// one warp's shuffles (layernorm's statistics and the squared norm).
template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's total of v, returned to every thread (the same bits: each warp adds the warp totals
// in the same order); blockDim.x a multiple of 32. Every thread of the block must call it.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T warp_totals[32];
  v = warp_sum(v);
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // a previous call's readers are done with warp_totals
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? warp_totals[lane] : T(0));
}

}  // namespace qkv::kernels::cuda::detail
