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
  QKV_CHECK(false, what << " '" << name << "' is not one of " << compute_type_names());
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
