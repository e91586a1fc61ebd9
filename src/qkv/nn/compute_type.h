// ComputeType: how a model computes at inference, chosen once when it is loaded (CTranslate2's
// compute_type): the dtype its linear layers multiply in, and the dtype of its embedding tables.
//
//   float32    linears f32, packed for kernels::gemm_packed     tables f32
//   bf16       linears bf16, packed for vdpbf16ps (AVX512_BF16; else    tables bf16
//              the reference path: see ops::LinearWeight)
//   int8       linears int8 per output channel (kernels/int8_gemm.h)  tables f32
//   int8_bf16  linears int8                                           tables bf16
//
// Layer norms, attention, softmax and the activations between layers stay float32 in every type.
// Training multiplies the float32 weights themselves, in float32 or, with --precision bf16, with
// both operands rounded to bf16 (ops/precision.h).
#pragma once
#include <string>
#include <string_view>

#include "qkv/core/dtype.h"

namespace qkv::nn {

enum class ComputeType { Float32, BF16, Int8, Int8BF16 };

const char* compute_type_name(ComputeType type);  // "float32", "bf16", "int8", "int8_bf16"
// The inverse of compute_type_name, which also reads CTranslate2's names of the same types
// (float, bfloat16, int8_float32: int8 with float32 for the rest, int8_bfloat16); throws
// qkv::Error naming `what` (a flag, a parameter) and the accepted names for anything else.
ComputeType parse_compute_type(std::string_view name, const std::string& what = "compute type");
// "float32, bf16, int8, int8_bf16"
const char* compute_type_names();
DType linear_dtype(ComputeType type);  // F32, BF16, I8, I8
DType table_dtype(ComputeType type);   // F32, BF16, F32, BF16

}  // namespace qkv::nn
