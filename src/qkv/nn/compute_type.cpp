#include "qkv/nn/compute_type.h"

#include "qkv/core/error.h"

namespace qkv::nn {

namespace {
constexpr ComputeType kAll[] = {ComputeType::Float32, ComputeType::BF16, ComputeType::Int8, ComputeType::Int8BF16};
}

const char* compute_type_name(ComputeType type) {
  switch (type) {
    case ComputeType::Float32: return "float32";
    case ComputeType::BF16: return "bf16";
    case ComputeType::Int8: return "int8";
    case ComputeType::Int8BF16: return "int8_bf16";
  }
  return "?";
}

const char* compute_type_names() { return "float32, bf16, int8, int8_bf16"; }

ComputeType parse_compute_type(std::string_view name, const std::string& what) {
  for (ComputeType t : kAll)
    if (name == compute_type_name(t)) return t;
  // CTranslate2's names of the same types, for users who bring them along.
  if (name == "float") return ComputeType::Float32;
  if (name == "bfloat16") return ComputeType::BF16;
  if (name == "int8_float32") return ComputeType::Int8;
  if (name == "int8_bfloat16") return ComputeType::Int8BF16;
  QKV_CHECK(false, what << " '" << name << "' is not one of " << compute_type_names()
                        << " (CTranslate2's float, bfloat16, int8_float32 and int8_bfloat16 are read as those)");
  return ComputeType::Float32;
}

DType linear_dtype(ComputeType type) {
  switch (type) {
    case ComputeType::Float32: return DType::F32;
    case ComputeType::BF16: return DType::BF16;
    case ComputeType::Int8:
    case ComputeType::Int8BF16: return DType::I8;
  }
  return DType::F32;
}

DType table_dtype(ComputeType type) {
  return type == ComputeType::BF16 || type == ComputeType::Int8BF16 ? DType::BF16 : DType::F32;
}

}  // namespace qkv::nn
