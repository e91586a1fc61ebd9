// Counter-based random numbers: the value at index i depends only on (seed, i), so dropout masks
// are reproducible for any thread count and can be regenerated in backward instead of stored.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// SplitMix64 finaliser applied to seed and counter: a well-mixed 64-bit hash.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
inline float uniform01(uint64_t seed, uint64_t counter) {
  uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Dropout keeps an element when its uniform draw is >= p (probability 1 - p).
inline bool dropout_keep(uint64_t seed, uint64_t counter, float p) { return uniform01(seed, counter) >= p; }

}  // namespace qkv::kernels
