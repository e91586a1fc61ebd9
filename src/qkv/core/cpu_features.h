// What the host CPU offers, read once with CPUID: for run-time kernel dispatch and for `qkv info`.
#pragma once
#include <string>

namespace qkv {

struct CpuFeatures {
  std::string model;  // the brand string, "AMD EPYC 9R14 96-Core Processor"
  bool intel = false;  // the vendor string is "GenuineIntel"
  bool amd = false;    // "AuthenticAMD"
  // CPUID leaf 1's family and model (with their extended fields) and stepping: a hypervisor may
  // shorten the brand string to "AMD EPYC", and hide instruction sets, but these still say which
  // core it is (family 25 model 1 is a Zen 3, model 17 a Zen 4: their AVX-512 flags alone cannot tell
  // a Zen 3 from a Zen 4 whose AVX-512 is hidden).
  int family = 0, model_number = 0, stepping = 0;
  // The core's name where family and model are known ("Zen 3", "Zen 4", "Sapphire Rapids", ...), else "".
  std::string microarchitecture;
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // "AVX2 FMA AVX512F AVX512BW AVX512VL AVX512_VNNI AVX512_BF16 (no AMX)"
  std::string summary() const;
  // "AMD EPYC (Zen 3: family 25, model 1)": the brand string, then the core (family and model alone
  // where the name is not known).
  std::string description() const;
};

// The core's name for a vendor's CPUID family and model, or "" (exposed for its test).
std::string microarchitecture_name(bool intel, bool amd, int family, int model);

const CpuFeatures& cpu_features();

}  // namespace qkv
