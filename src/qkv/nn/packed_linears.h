// Linear layers' weights packed once for inference products of a few rows (kernels::gemm_packed).
//
// Incremental decoding multiplies 4..128 rows by the same weights at every step; BLAS re-packs the
// whole weight matrix on each call, which costs about as much as the product at those shapes
// (20% of beam-search time in the profile). A decoding state packs the layers it steps through
// once and hands the packs to the layers explicitly, so nothing hidden can go stale: the packs live
// exactly as long as the state that made them.
#pragma once
#include <memory>
#include <unordered_map>

#include "qkv/kernels/packed_gemm.h"
#include "qkv/nn/layers.h"

namespace qkv::nn {

class PackedLinears {
 public:
  // Packs layer's current weight (a copy: later changes to the weight are not seen).
  void add(const Linear& layer);
  // The pack of `layer`, or null when it was not added.
  const kernels::PackedWeights* find(const Linear& layer) const;
  int64_t bytes() const;

 private:
  std::unordered_map<const Linear*, kernels::PackedWeights> packs_;
};

// layer.forward(x), through layer's pack when `packed` holds one, no gradient is being recorded and
// x has at most kMaxPackedRows rows; otherwise (training, scoring, long inputs) BLAS as always.
// Both compute x @ W^T + b in float32; the sums run in another order, so the results agree to
// rounding, not bit for bit.
Var linear(const Linear& layer, const Var& x, const PackedLinears* packed);

// Beyond this many rows BLAS's own packing pays for itself and its cache blocking wins.
inline constexpr int64_t kMaxPackedRows = 256;

}  // namespace qkv::nn
