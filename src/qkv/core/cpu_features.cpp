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

CpuFeatures detect() {
  CpuFeatures f;
  f.model = brand_string();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
    f.intel = std::string(vendor) == "GenuineIntel";
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) f.fma = bit(c, 12);
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

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace qkv
