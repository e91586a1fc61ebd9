#include "qkv/core/cpu_baseline.h"

#include <cpuid.h>

#include <cstring>

namespace qkv {

namespace {

bool bit(uint64_t value, int b) { return (value >> b) & 1u; }

// Appends ", name" (or "name" first) to out while it fits.
void append(char* out, size_t size, const char* name) {
  const size_t used = std::strlen(out), sep = used ? 2 : 0, add = std::strlen(name);
  if (used + sep + add + 1 > size) return;
  if (sep) std::memcpy(out + used, ", ", 2);
  std::memcpy(out + used + sep, name, add + 1);
}

}  // namespace

CpuidWords read_cpuid_words() {
  CpuidWords w;
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) w.leaf1_ecx = c;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    w.leaf7_ebx = b;
  }
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000001u && __get_cpuid(0x80000001u, &a, &b, &c, &d))
    w.ext1_ecx = c;
  if (bit(w.leaf1_ecx, 27)) {  // OSXSAVE: XGETBV may be executed
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    w.xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  return w;
}

const char* missing_baseline_features(const CpuidWords& w, char* out, size_t size) {
  if (size == 0) return out;
  out[0] = '\0';
  const bool os_saves_avx = bit(w.leaf1_ecx, 27) && (w.xcr0 & 0x6) == 0x6;  // XMM and YMM state
  if (!bit(w.leaf1_ecx, 28)) append(out, size, "AVX");
  else if (!os_saves_avx) append(out, size, "AVX (the OS does not enable it)");
  if (!bit(w.leaf7_ebx, 5)) append(out, size, "AVX2");
  if (!bit(w.leaf1_ecx, 12)) append(out, size, "FMA");
  if (!bit(w.leaf1_ecx, 29)) append(out, size, "F16C");
  if (!bit(w.leaf7_ebx, 3)) append(out, size, "BMI1");
  if (!bit(w.leaf7_ebx, 8)) append(out, size, "BMI2");
  if (!bit(w.ext1_ecx, 5)) append(out, size, "LZCNT");
  if (!bit(w.leaf1_ecx, 22)) append(out, size, "MOVBE");
  return out;
}

}  // namespace qkv
