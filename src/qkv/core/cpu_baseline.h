// The instruction sets this build of qkv is compiled for (-march=x86-64-v3: AVX, AVX2, FMA, BMI1,
// BMI2, F16C, LZCNT, MOVBE, with the OS saving the AVX registers) and which of them a CPU lacks.
// Any function of qkv may use them, so a CPU without them would stop at an illegal instruction
// somewhere, with no message; the CLI asks here first (cli/cpu_gate.cpp).
//
// cpu_baseline.cpp is compiled for the plain x86-64 baseline (CMakeLists.txt), so that the check
// itself runs on any x86-64 CPU. No allocation: it runs before static initialisation.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qkv {

// The CPUID and XGETBV words the check reads.
struct CpuidWords {
  uint32_t leaf1_ecx = 0;     // CPUID 1: AVX, FMA, MOVBE, OSXSAVE, F16C
  uint32_t leaf7_ebx = 0;     // CPUID 7.0: AVX2, BMI1, BMI2
  uint32_t ext1_ecx = 0;      // CPUID 0x80000001: LZCNT (ABM)
  uint64_t xcr0 = 0;          // XGETBV 0 where OSXSAVE: which register states the OS saves
};

// This CPU's words.
CpuidWords read_cpuid_words();

// The baseline features `words` lack, as "AVX2, FMA" in `out` (at most `size` bytes, NUL included),
// or "" when it has them all. Returns out.
const char* missing_baseline_features(const CpuidWords& words, char* out, size_t size);

}  // namespace qkv
