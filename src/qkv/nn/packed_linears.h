// Linear layers' weights packed once for inference products (kernels::gemm_packed).
//
// Incremental decoding multiplies 4..128 rows by the same weights at every step; BLAS re-packs the
// whole weight matrix on each call, which costs about as much as the product at those shapes
// (20% of beam-search time in the profile). A decoding state packs the layers it steps through
// once and hands the packs to the layers explicitly, so nothing hidden can go stale: the packs live
// exactly as long as the state that made them. An api::Encoder packs its model once at load, for
// batches of sentences.
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
// otherwise (training, scoring) BLAS as always. A float32 pack computes x @ W^T + b in another
// summation order than BLAS, so the results agree to rounding, not bit for bit. Packs serve any
// number of rows: gemm_packed blocks long inputs by rows and beats OpenBLAS from 1 row to thousands
// (bench_int8_gemm --large: 175-193 GFLOP/s against 159-177 at 960 and 4096 rows, 2 threads).
Var linear(const Linear& layer, const Var& x, const PackedLinears* packed);

}  // namespace qkv::nn
