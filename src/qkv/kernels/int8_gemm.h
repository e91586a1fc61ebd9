// C = A @ W^T + bias in 8-bit integers, for inference (`qkv translate --quantize int8`).
//
// Weights are quantized once per output channel and activations per row, both symmetric to
// [-127, 127] (scale = max|x| / 127, q = round-half-even(x * 127 / max|x|)); the products are summed
// exactly in int32 and dequantized as C[m][n] = float(acc) * (a_scale[m] * w_scale[n]) + bias[n]
// (one fused multiply-add). This is the scheme of CTranslate2's int8 models. A row whose max|x| is
// below kNegligibleMax (all zeros, or denormals, where 127 / max|x| overflows) has scale 0 and
// quantizes to zeros, so its outputs are exactly the bias.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace qkv::kernels {

inline constexpr float kNegligibleMax = 1e-36f;  // > 127 / FLT_MAX

// W (out_features, in_features) quantized per output channel and packed for gemm_int8's micro-kernels:
// panels of kPanel output features, K padded with zeros to a multiple of kQuad. Within panel p, the
// kPair inputs q*2, q*2+1 of feature p*16 + j are the bytes q*32 + j*2 + {0, 1}: one 32-byte line
// per input pair, which the AVX2 kernel sign-extends to two vectors of 8 (k, k+1) int16 pairs; two
// consecutive lines (one 64-byte line, an input quad) are what the AVX-512 VNNI kernel interleaves
// into 16 (k..k+3) byte quads. Features past out_features in the last panel are zero (weights and
// scales). After the panels come the column sums: sum_k W[o][k] as int32 for each of the
// panels * kPanel features (the VNNI kernel's compensation for its unsigned activations).
class QuantizedWeights {
 public:
  static constexpr int64_t kPanel = 16;
  static constexpr int64_t kPair = 2;
  static constexpr int64_t kQuad = 4;
  // The int32 sum of K products of magnitude <= 127 * 127 cannot overflow below this many inputs.
  static constexpr int64_t kMaxInFeatures = INT32_MAX / (127 * 127);

  static int64_t padded_in_features(int64_t in_features) { return (in_features + kQuad - 1) / kQuad * kQuad; }
  static int64_t scale_count(int64_t out_features) { return (out_features + kPanel - 1) / kPanel * kPanel; }
  // Where the column sums start in the storage: after the panels (a multiple of 64 bytes).
  static int64_t column_sums_offset(int64_t out_features, int64_t in_features) {
    return scale_count(out_features) * padded_in_features(in_features);
  }
  // Bytes of storage (panels and column sums) and floats of scales a quantized (out_features,
  // in_features) weight takes.
  static int64_t storage_bytes(int64_t out_features, int64_t in_features) {
    return column_sums_offset(out_features, in_features) +
           scale_count(out_features) * static_cast<int64_t>(sizeof(int32_t));
  }

  QuantizedWeights() = default;
  // Storage of its own (64-byte aligned).
  QuantizedWeights(int64_t out_features, int64_t in_features);
  // A read-only view of storage and scales someone else owns (an I8 Layout::Packed tensor and its
  // scales: ops/linear.cpp), both 64-byte aligned; they must outlive the view.
  static QuantizedWeights view(const int8_t* storage, const float* scales, int64_t out_features,
                               int64_t in_features);

  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  int64_t padded_in_features() const { return padded_in_features(in_); }
  int64_t panels() const { return (out_ + kPanel - 1) / kPanel; }
  const int8_t* panel(int64_t p) const { return data_ + p * padded_in_features() * kPanel; }
  int8_t* data() { return data_; }
  // sum_k W[o][k] of the quantized weights, padded with zeros to panels() * kPanel int32.
  const int32_t* column_sums() const {
    return reinterpret_cast<const int32_t*>(data_ + column_sums_offset(out_, in_));
  }
  // Per-channel scales, padded with zeros to panels() * kPanel floats.
  const float* scales() const { return scales_; }
  float* scales() { return scales_; }
  // The quantized weight W[o][k] as stored (for tests and inspection).
  int8_t at(int64_t o, int64_t k) const {
    return panel(o / kPanel)[(k / kPair) * kPanel * kPair + (o % kPanel) * kPair + k % kPair];
  }
  bool empty() const { return !data_; }

 private:
  template <class T>
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  int64_t out_ = 0, in_ = 0;
  std::unique_ptr<int8_t, Free<int8_t>> owned_data_;  // null for a view
  std::unique_ptr<float, Free<float>> owned_scales_;
  int8_t* data_ = nullptr;  // 64-byte aligned: one input quad of a panel per line
  float* scales_ = nullptr;  // 64-byte aligned
};

// Quantizes W (out_features, in_features) row-major. Throws std::invalid_argument past kMaxInFeatures.
QuantizedWeights quantize_weights(const float* W, int64_t out_features, int64_t in_features);
// The same into `storage` (storage_bytes: panels and column sums) and `scales` (scale_count floats),
// both 64-byte aligned.
void quantize_weights_into(const float* W, int64_t out_features, int64_t in_features, int8_t* storage, float* scales);

// Quantizes n floats symmetrically to [-127, 127] as described above and returns the scale
// max|x| / 127 (0 for a row below kNegligibleMax, whose values all quantize to 0).
float quantize_row(const float* x, int64_t n, int8_t* q);

// C (M, out) = dequantized(quantize(A) @ W^T) + bias, with A (M, in; row stride lda) quantized per
// row on the fly, bias_or_null out floats or null, C of row stride ldc. Every element of C's M x out
// block is written (C need not be initialised). The int32 sums are exact, so the result does not
// depend on the thread count, nor on the build that runs: AVX-512 VNNI where kernels/isa.h enables
// it, else AVX2 (kernels/int8_gemm_isa.h).
void gemm_int8(const float* A, int64_t M, int64_t lda, const QuantizedWeights& W, const float* bias_or_null, float* C,
               int64_t ldc);

// A map of n floats applied to each row of A just before it is quantized (an activation), or null.
using RowMap = void (*)(float* y, const float* x, int64_t n);
// gemm_int8 of map(A): each row goes through `map` into a buffer of the calling thread, then is
// quantized, so map(A) is never written out (a feed-forward's second product quantizes GELU(h) row
// by row). C gets the bits gemm_int8 gives on map(A) computed apart.
void gemm_int8_mapped(const float* A, int64_t M, int64_t lda, RowMap map, const QuantizedWeights& W,
                      const float* bias_or_null, float* C, int64_t ldc);
// One product of gemm_int8_many: C (M, W.out_features(); row stride ldc) = A @ W^T + bias.
struct Int8Product {
  const QuantizedWeights* W;
  const float* bias_or_null;
  float* C;
  int64_t ldc;
};
// Several products of the same A (attention's W_q, W_k and W_v on one input), every W of A's
// in_features: A is quantized once and all the products run in one parallel region. Each C gets
// the bits gemm_int8 would give it.
void gemm_int8_many(const float* A, int64_t M, int64_t lda, const Int8Product* products, int64_t count);

}  // namespace qkv::kernels
