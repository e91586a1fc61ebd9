// Linear weights prepared for inference (ops.h: LinearWeight): one form per dtype; the products
// with them are linear_forward's cases (linear.cpp).
#include <algorithm>
#include <vector>

#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/int8_gemm_isa.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/kernels/wide_tile.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {
namespace {

void check_int8_in_features(int64_t in) {
  QKV_CHECK(in <= kernels::QuantizedWeights::kMaxInFeatures,
            "int8 weights of " << in << " input features: the int32 sums could overflow past "
                               << kernels::QuantizedWeights::kMaxInFeatures);
}

// w (out, in) f32 on a GPU in kernels::cuda::gemm_int8's form: each output channel quantized on the
// host by kernels::quantize_row, the CPU's rule, into zero-padded rows, then copied to w's device.
// The tensor keeps w's logical shape (Layout::Packed: its storage is the padded rows).
LinearWeight int8_weight_on_gpu(const Tensor& w) {
  const int64_t out = w.size(0), in = w.size(1);
  check_int8_in_features(in);
  const int64_t ld = kernels::cuda::int8_weight_ld(in), rows = kernels::cuda::int8_weight_rows(out);
  const Tensor host = w.to(Device::cpu());
  std::vector<int8_t> quantized(static_cast<size_t>(rows * ld), 0);
  Tensor scales = Tensor::zeros(Dims{rows});
#pragma omp parallel for schedule(static) if (out * in > (int64_t{1} << 16))
  for (int64_t o = 0; o < out; ++o)
    scales.f32()[o] = kernels::quantize_row(host.f32() + o * in, in, quantized.data() + o * ld);
  LinearWeight lw;
  lw.weight = Tensor::empty_packed(w.shape(), DType::I8, rows * ld, w.device());
  cuda::copy(lw.weight.data<int8_t>(), w.device(), quantized.data(), Device::cpu(), quantized.size());
  lw.scale = scales.to(w.device());
  return lw;
}

}  // namespace

LinearWeight prepare_linear_weight(const Tensor& w_in, DType dtype) {
  QKV_CHECK(w_in.dim() == 2 && w_in.dtype() == DType::F32 && w_in.layout() == Layout::Strided,
            "prepare_linear_weight: expected an f32 (out, in) weight, got " << w_in.describe());
  const Tensor w = w_in.contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  LinearWeight lw;
  if (w.device().is_cuda()) {  // cuBLAS reads row-major weights: float32 as they are (shared, not copied:
                               // GPU memory is scarcer), bf16 rounded, int8 quantized as on the CPU
    QKV_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::I8,
              "prepare_linear_weight: no " << dtype_name(dtype) << " weights on " << w.device().name()
                                           << " (float32, bf16 and int8 are)");
    if (dtype == DType::I8) return int8_weight_on_gpu(w);
    lw.weight = dtype == DType::F32 ? w : w.to(DType::BF16);
    return lw;
  }
  switch (dtype) {
    case DType::F32:
      lw.weight = Tensor::empty_packed(w.shape(), DType::F32, kernels::PackedWeights::storage_floats(out, in));
      kernels::pack_weights_into(w.f32(), out, in, lw.weight.f32());
      break;
    case DType::I8:
      check_int8_in_features(in);
      lw.weight = Tensor::empty_packed(w.shape(), DType::I8, kernels::QuantizedWeights::storage_bytes(out, in));
      lw.scale = Tensor::empty(Dims{kernels::QuantizedWeights::scale_count(out)});
      kernels::quantize_weights_into(w.f32(), out, in, lw.weight.data<int8_t>(), lw.scale.f32());
      break;
    case DType::BF16:
      if (kernels::packed_bf16_available()) {  // vdpbf16ps or AMX panels; 2 bf16 elements a word
        lw.weight = Tensor::empty_packed(w.shape(), DType::BF16, 2 * kernels::packed_bf16_words(out, in));
        kernels::pack_bf16_weights_into(w.f32(), out, in, reinterpret_cast<uint32_t*>(lw.weight.data<bfloat16>()));
      } else {
        lw.weight = w.to(DType::BF16);  // the reference path
      }
      break;
    default:
      QKV_CHECK(false, "prepare_linear_weight: no " << dtype_name(dtype) << " form of a linear weight (f32, i8, bf16)");
  }
  return lw;
}

bool linear_kernel_is_reference(DType dtype) { return dtype == DType::BF16 && !kernels::packed_bf16_available(); }

std::string linear_kernel_description(DType dtype) {
  switch (dtype) {
    case DType::F32: return "qkv's packed float32 GEMM (" + kernels::wide_tile::description() + " tile)";
    case DType::I8:
      if (kernels::int8_isa::amx_or_null())
        return "qkv's int8 GEMM (AMX-INT8 tiles, VNNI below 32 rows; activations quantized per row)";
      return kernels::int8_isa::vnni_or_null() ? "qkv's int8 GEMM (AVX-512 VNNI vpdpbusd; activations quantized per row)"
                                               : "qkv's int8 GEMM (AVX2; activations quantized per row)";
    case DType::BF16:
      if (kernels::bf16_isa::amx_or_null())
        return "qkv's packed bf16 GEMM (AMX-BF16 tiles; activations rounded to bf16, float32 sums)";
      return kernels::packed_bf16_available()
                 ? "qkv's packed bf16 GEMM (AVX512_BF16 vdpbf16ps; activations rounded to bf16, float32 sums)"
                 : "reference path (bf16 widened to float32 per product: this CPU, or QKV_ISA, lacks AVX512_BF16)";
    default: return "none";
  }
}

}  // namespace qkv::ops
