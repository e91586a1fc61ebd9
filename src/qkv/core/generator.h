// Generator: the source of randomness for initialisation and dropout, like torch.Generator.
// Dropout draws come from a counter-based hash of (seed, offset), so the state is two integers:
// saving and restoring them makes a resumed run draw exactly the masks an uninterrupted one would.
#pragma once
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

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
  // Rows: a training step that runs a batch in chunks of rows (micro-batches, or data-parallel ranks
  // that each take a share of the batch) gives every row the dropout mask it gets when the whole
  // batch runs at once. While a window is set, a dropout call over a tensor whose dimension 0 holds
  // rows [row0, row0 + rows) of a batch of `batch_rows` rows reserves the counters of the whole
  // batch's call and returns the first of the chunk's slice. The caller sets the generator's offset
  // back to the step's start before each chunk (so every chunk ends at the same offset, the one the
  // whole batch ends at) and clears the window after the step.
  void set_rows(int64_t row0, int64_t rows, int64_t batch_rows) {
    row0_ = row0;
    rows_ = rows;
    batch_rows_ = batch_rows;
  }
  void clear_rows() { set_rows(0, 0, 0); }
  // reserve(n) for a dropout call of n counters over a tensor of `rows` rows (its dimension 0).
  uint64_t reserve_rows(uint64_t n, int64_t rows);

  // An engine for one-off draws (parameter initialisation, synthetic data), derived from the state.
  std::mt19937_64 engine() { return std::mt19937_64(seed_ * 0x9e3779b97f4a7c15ULL + reserve(1)); }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  int64_t row0_ = 0, rows_ = 0, batch_rows_ = 0;  // batch_rows_ 0: no window
};

inline uint64_t Generator::reserve_rows(uint64_t n, int64_t rows) {
  if (batch_rows_ == 0) return reserve(n);
  if (rows != rows_ || rows <= 0 || n % static_cast<uint64_t>(rows) != 0)
    throw std::logic_error("Generator::reserve_rows: a dropout call over " + std::to_string(rows) +
                           " rows inside a window of " + std::to_string(rows_) + " rows");
  const uint64_t per_row = n / static_cast<uint64_t>(rows);
  const uint64_t first = offset_ + static_cast<uint64_t>(row0_) * per_row;
  offset_ += static_cast<uint64_t>(batch_rows_) * per_row;
  return first;
}

}  // namespace qkv
