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

#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/nn/layers.h"

namespace qkv::nn {

// How packed weights are stored: float32 (the same products as BLAS up to rounding), or int8 per
// output channel with activations quantized per row on the fly (kernels/int8_gemm.h: CTranslate2's
// scheme; a quarter of the memory and about twice the speed, at some accuracy).
enum class LinearPrecision { Float32, Int8 };

class PackedLinears {
 public:
  explicit PackedLinears(LinearPrecision precision = LinearPrecision::Float32) : precision_(precision) {}
  LinearPrecision precision() const { return precision_; }
  // Packs layer's current weight (a copy: later changes to the weight are not seen).
  void add(const Linear& layer);
  // The pack of `layer` in this precision, or null when it was not added (or is of the other one).
  const kernels::PackedWeights* find(const Linear& layer) const;
  const kernels::QuantizedWeights* find_int8(const Linear& layer) const;
  int64_t bytes() const;

 private:
  LinearPrecision precision_;
  std::unordered_map<const Linear*, kernels::PackedWeights> packs_;
  std::unordered_map<const Linear*, kernels::QuantizedWeights> quantized_;
};

// layer.forward(x), through layer's pack when `packed` holds one and no gradient is being recorded;
// otherwise (training, scoring) BLAS as always. A float32 pack is used for at most kMaxPackedRows
// rows (BLAS for longer inputs) and computes x @ W^T + b in another summation order, so the results
// agree to rounding, not bit for bit; an int8 pack is used for any number of rows.
Var linear(const Linear& layer, const Var& x, const PackedLinears* packed);

// Beyond this many rows BLAS's own packing pays for itself and its cache blocking wins.
inline constexpr int64_t kMaxPackedRows = 256;

}  // namespace qkv::nn
