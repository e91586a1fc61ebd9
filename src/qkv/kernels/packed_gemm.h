// C = A @ W^T + bias against a weight matrix packed once for many products.
//
// Decoding multiplies a few rows (4..128) by the same nn.Linear weights at every step; BLAS re-packs
// the whole weight matrix on each call, which costs as much as the product itself at these shapes.
// pack_weights lays W out once in the order the micro-kernel reads it, and gemm_packed reuses it.
// Encoder batches (hundreds to thousands of rows) gain too: no packing per call, the bias added in
// the kernel, and row blocks that keep A in L2 (bench_int8_gemm --large).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "qkv/kernels/wide_tile.h"

namespace qkv::kernels {

// W (out_features, in_features) row-major, stored as panels of kPanel output features: panel p holds
// W[p*16 + j][k] at data()[p * in * 16 + k * 16 + j] (k-major, so one k is two contiguous 8-float
// vectors); the features past out_features in the last panel are zero.
class PackedWeights {
 public:
  static constexpr int64_t kPanel = 16;

  // Floats of storage a packed (out_features, in_features) weight takes.
  static int64_t storage_floats(int64_t out_features, int64_t in_features) {
    return (out_features + kPanel - 1) / kPanel * kPanel * in_features;
  }

  PackedWeights() = default;
  // Storage of its own (64-byte aligned).
  PackedWeights(int64_t out_features, int64_t in_features);
  // A read-only view of packed storage someone else owns (a Layout::Packed tensor: ops/linear.cpp),
  // 64-byte aligned, storage_floats long; it must outlive the view.
  static PackedWeights view(const float* storage, int64_t out_features, int64_t in_features);

  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  int64_t panels() const { return (out_ + kPanel - 1) / kPanel; }
  const float* panel(int64_t p) const { return data_ + p * in_ * kPanel; }
  float* data() { return data_; }
  bool empty() const { return !data_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  int64_t out_ = 0, in_ = 0;
  std::unique_ptr<float, Free> owned_;  // null for a view
  float* data_ = nullptr;              // 64-byte aligned (aligned loads of whole cache lines)
};

PackedWeights pack_weights(const float* W, int64_t out_features, int64_t in_features);
// The same layout into `storage` (storage_floats floats, 64-byte aligned).
void pack_weights_into(const float* W, int64_t out_features, int64_t in_features, float* storage);

// C (M, out) = A (M, in; row stride lda) @ W^T + bias (bias_or_null: out floats or null); C has row
// stride ldc. Every element of C's M x out block is written (C need not be initialised).
void gemm_packed(const float* A, int64_t M, int64_t lda, const PackedWeights& W, const float* bias_or_null,
                 float* C, int64_t ldc);
// gemm_packed with a given tile (wide_tile.h: two panels at a time, or null: the 6 x 16 tile alone);
// gemm_packed passes wide_tile::chosen_or_null(), the tests pass each (the same bits).
void gemm_packed_with_tile(wide_tile::PairAccumulate pair, const float* A, int64_t M, int64_t lda,
                           const PackedWeights& W, const float* bias_or_null, float* C, int64_t ldc);

}  // namespace qkv::kernels
