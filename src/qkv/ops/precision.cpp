#include "qkv/ops/precision.h"

#include "qkv/core/error.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/wide_tile.h"

namespace qkv::ops {

namespace {
thread_local Precision current = Precision::Float32;
}  // namespace

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "float32"; }

const char* precision_names() { return "float32, bf16"; }

Precision parse_precision(const std::string& name) {
  if (name == "float32" || name == "fp32") return Precision::Float32;
  if (name == "bf16" || name == "bfloat16") return Precision::BF16;
  QKV_CHECK(false, "unknown precision '" << name << "'; expected one of " << precision_names());
  return Precision::Float32;
}

Precision product_precision() { return current; }

ProductPrecisionScope::ProductPrecisionScope(Precision p) : saved_(current) { current = p; }

ProductPrecisionScope::~ProductPrecisionScope() { current = saved_; }

std::string bf16_product_kernel() { return kernels::gemm_bf16_description(); }

std::string cpu_kernel_level() { return kernels::isa_description(); }

void check_cpu_kernel_level() {
  kernels::active_isa();
  kernels::wide_tile::chosen_or_null();  // QKV_FLOAT32_TILE too
}

}  // namespace qkv::ops
