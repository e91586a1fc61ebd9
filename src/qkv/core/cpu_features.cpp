#include "qkv/core/cpu_features.h"

#include <cpuid.h>

#include <cstring>

namespace qkv {

namespace {
bool bit(unsigned value, int b) { return (value >> b) & 1u; }

std::string brand_string() {
  unsigned regs[12] = {};
  unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);
  if (max_extended < 0x80000004u) return "unknown CPU";
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[i * 4], &regs[i * 4 + 1], &regs[i * 4 + 2], &regs[i * 4 + 3]);
  char text[49] = {};
  std::memcpy(text, regs, 48);
  std::string s(text);
  const auto first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown CPU" : s.substr(first, last - first + 1);
}

// Family 25 (0x19) holds both Zen 3 and Zen 4, told apart by model ranges (AMD's revision guides;
// Linux's arch/x86 lists the same); family 23 is Zen to Zen 2, 26 Zen 5.
std::string amd_core(int family, int model) {
  if (family == 23) return model >= 0x30 ? "Zen 2" : "Zen / Zen+";
  if (family == 26) return "Zen 5";
  if (family != 25) return "";
  if (model <= 0x0f || (model >= 0x20 && model <= 0x2f) || (model >= 0x50 && model <= 0x5f)) return "Zen 3";
  if (model >= 0x40 && model <= 0x4f) return "Zen 3+";
  if ((model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0x7f)) return "Zen 4";
  if (model >= 0xa0 && model <= 0xaf) return "Zen 4c";
  return "";
}

// Intel's server cores of family 6 that qkv's kernels care about (AVX-512, AMX).
std::string intel_core(int family, int model) {
  if (family != 6) return "";
  switch (model) {
    case 0x55: return "Skylake-SP / Cascade Lake";
    case 0x6a:
    case 0x6c: return "Ice Lake-SP";
    case 0x8f: return "Sapphire Rapids";
    case 0xcf: return "Emerald Rapids";
    case 0xad:
    case 0xae: return "Granite Rapids";
    default: return "";
  }
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = brand_string();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
    f.intel = std::string(vendor) == "GenuineIntel";
    f.amd = std::string(vendor) == "AuthenticAMD";
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.fma = bit(c, 12);
    const int base_family = static_cast<int>((a >> 8) & 0xf), base_model = static_cast<int>((a >> 4) & 0xf);
    f.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
    f.model_number = base_family == 0x6 || base_family == 0xf ? base_model + static_cast<int>(((a >> 16) & 0xf) << 4)
                                                              : base_model;
    f.stepping = static_cast<int>(a & 0xf);
    f.microarchitecture = microarchitecture_name(f.intel, f.amd, f.family, f.model_number);
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = bit(b, 5);
    f.avx512f = bit(b, 16);
    f.avx512dq = bit(b, 17);
    f.avx512bw = bit(b, 30);
    f.avx512vl = bit(b, 31);
    f.avx512_vnni = bit(c, 11);
    f.amx_bf16 = bit(d, 22);
    f.amx_tile = bit(d, 24);
    f.amx_int8 = bit(d, 25);
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = bit(a, 5);
  }
  return f;
}
}  // namespace

std::string CpuFeatures::summary() const {
  std::string s;
  const auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(avx512f, "AVX512F");
  add(avx512bw, "AVX512BW");
  add(avx512vl, "AVX512VL");
  add(avx512_vnni, "AVX512_VNNI");
  add(avx512_bf16, "AVX512_BF16");
  add(amx_tile, "AMX_TILE");
  add(amx_bf16, "AMX_BF16");
  add(amx_int8, "AMX_INT8");
  if (!amx_tile) s += s.empty() ? "(no AMX)" : " (no AMX)";
  return s;
}

std::string CpuFeatures::description() const {
  if (family == 0) return model;
  const std::string numbers = "family " + std::to_string(family) + ", model " + std::to_string(model_number);
  return model + " (" + (microarchitecture.empty() ? numbers : microarchitecture + ": " + numbers) + ")";
}

std::string microarchitecture_name(bool intel, bool amd, int family, int model) {
  if (amd) return amd_core(family, model);
  return intel ? intel_core(family, model) : "";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace qkv
