// What the host CPU offers, read once with CPUID: for run-time kernel dispatch and for `qkv info`.
#pragma once
#include <string>

namespace qkv {

struct CpuFeatures {
  std::string model;  // the brand string, "AMD EPYC 9R14 96-Core Processor"
  bool intel = false;  // the vendor string is "GenuineIntel"
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // "AVX2 FMA AVX512F AVX512BW AVX512VL AVX512_VNNI AVX512_BF16 (no AMX)"
  std::string summary() const;
};

const CpuFeatures& cpu_features();

}  // namespace qkv
