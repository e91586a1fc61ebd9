// Counter-based random numbers: the value at index i depends only on (seed, i), so dropout masks
// are reproducible for any thread count and can be regenerated in backward instead of stored.
#pragma once
#include <cstdint>

#include "qkv/core/hash.h"

namespace qkv::kernels {

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
QKV_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t counter) {
  uint64_t h = qkv::mix64(seed * 0x9e3779b97f4a7c15ULL + qkv::mix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Dropout keeps an element when its uniform draw is >= p (probability 1 - p).
QKV_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t counter, float p) {
  return uniform01(seed, counter) >= p;
}

}  // namespace qkv::kernels
