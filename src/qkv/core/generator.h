// Generator: the source of randomness for initialisation and dropout, like torch.Generator.
// Dropout draws come from a counter-based hash of (seed, offset), so the state is two integers:
// saving and restoring them makes a resumed run draw exactly the masks an uninterrupted one would.
#pragma once
#include <cstdint>
#include <random>

namespace qkv {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n counters for one dropout call; returns the first.
  uint64_t reserve(uint64_t n) {
    const uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  // An engine for one-off draws (parameter initialisation, synthetic data), derived from the state.
  std::mt19937_64 engine() { return std::mt19937_64(seed_ * 0x9e3779b97f4a7c15ULL + reserve(1)); }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace qkv
