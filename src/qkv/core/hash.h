// mix64: SplitMix64's finaliser, a bijective, well-mixed 64-bit hash. The counter-based random
// streams (dropout masks, sampling, batch order) are built from it, so a draw depends only on its
// key, never on threads or call order.
#pragma once
#include <cstdint>

// Callable from CUDA kernels too, so the GPU draws the CPU's numbers (dropout masks bit for bit).
#ifdef __CUDACC__
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif

namespace qkv {

QKV_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace qkv
