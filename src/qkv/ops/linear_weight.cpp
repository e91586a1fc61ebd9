// Linear products against a weight prepared for inference (ops.h: LinearWeight), one case per
// (dtype, layout); a device backend adds its cases here.
#include <algorithm>

#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

LinearWeight prepare_linear_weight(const Tensor& w_in, DType dtype) {
  QKV_CHECK(w_in.dim() == 2 && w_in.dtype() == DType::F32 && w_in.layout() == Layout::Strided,
            "prepare_linear_weight: expected an f32 (out, in) weight, got " << w_in.describe());
  const Tensor w = w_in.contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  LinearWeight lw;
  switch (dtype) {
    case DType::F32:
      lw.weight = Tensor::empty_packed(w.shape(), DType::F32, kernels::PackedWeights::storage_floats(out, in));
      kernels::pack_weights_into(w.f32(), out, in, lw.weight.f32());
      break;
    case DType::I8:
      QKV_CHECK(in <= kernels::QuantizedWeights::kMaxInFeatures,
                "int8 weights of " << in << " input features: the int32 sums could overflow past "
                                   << kernels::QuantizedWeights::kMaxInFeatures);
      lw.weight = Tensor::empty_packed(w.shape(), DType::I8, kernels::QuantizedWeights::storage_bytes(out, in));
      lw.scale = Tensor::empty(Dims{kernels::QuantizedWeights::scale_count(out)});
      kernels::quantize_weights_into(w.f32(), out, in, lw.weight.data<int8_t>(), lw.scale.f32());
      break;
    case DType::BF16:
      lw.weight = w.to(DType::BF16);
      break;
    default:
      QKV_CHECK(false, "prepare_linear_weight: no " << dtype_name(dtype) << " form of a linear weight (f32, i8, bf16)");
  }
  return lw;
}

namespace {
kernels::QuantizedWeights quantized_view(const LinearWeight& w) {
  QKV_CHECK(w.scale.defined() && w.scale.dtype() == DType::F32 &&
                w.scale.numel() == kernels::QuantizedWeights::scale_count(w.out_features()),
            "linear: an i8 weight needs its f32 scales, got " << w.scale.describe());
  return kernels::QuantizedWeights::view(w.weight.data<int8_t>(), w.scale.f32(), w.out_features(), w.in_features());
}
}  // namespace

Tensor linear_forward(const Tensor& x_in, const LinearWeight& w, const Tensor& b) {
  const Tensor& W = w.weight;
  if (W.dtype() == DType::F32 && W.layout() == Layout::Strided) return linear_forward(x_in, W, b);
  QKV_CHECK(W.dim() == 2, "linear: weight must be 2-D (out, in), got " << W.describe());
  QKV_CHECK(x_in.dim() >= 1 && x_in.size(-1) == W.size(1),
            "linear: input " << x_in.shape() << " does not match weight " << W.shape()
                             << " (input's last dim must equal weight.size(1))");
  QKV_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == W.size(0)),
            "linear: bias " << b.shape() << " does not match weight " << W.shape());
  if (W.dtype() == DType::BF16 && W.layout() == Layout::Strided)  // the reference path (ops.h)
    return linear_forward(x_in.to(DType::BF16).to(DType::F32), W.to(DType::F32), b);
  QKV_CHECK(W.layout() == Layout::Packed && (W.dtype() == DType::F32 || W.dtype() == DType::I8),
            "linear: no product with a " << W.describe() << " weight");
  const Tensor x = x_in.contiguous();
  const int64_t K = W.size(1), N = W.size(0), M = x.numel() / std::max<int64_t>(K, 1);
  Dims shape = x.shape();
  shape[shape.size() - 1] = N;
  Tensor y = Tensor::empty(shape);
  const Tensor bias = b.defined() ? b.contiguous() : Tensor();
  const float* bias_or_null = bias.defined() ? bias.f32() : nullptr;
  if (W.dtype() == DType::I8)
    kernels::gemm_int8(x.f32(), M, K, quantized_view(w), bias_or_null, y.f32(), N);
  else
    kernels::gemm_packed(x.f32(), M, K, kernels::PackedWeights::view(W.f32(), N, K), bias_or_null, y.f32(), N);
  return y;
}

std::string linear_kernel_description(DType dtype) {
  switch (dtype) {
    case DType::F32: return "qkv's packed float32 GEMM (AVX2, FMA)";
    case DType::I8: return "qkv's int8 GEMM (AVX2; activations quantized per row)";
    case DType::BF16: return "reference path (bf16 widened to float32, BLAS; the fast bf16 kernels are not built yet)";
    default: return "none";
  }
}

}  // namespace qkv::ops
