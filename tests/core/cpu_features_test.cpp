// The CPU's description: the core named from CPUID's family and model, which tell a Zen 3 from a
// Zen 4 whose AVX-512 a hypervisor hides (their instruction flags and "AMD EPYC" brand are alike).
#include "qkv/core/cpu_baseline.h"
#include "qkv/core/cpu_features.h"

#include <gtest/gtest.h>

namespace {

TEST(CpuFeatures, NamesTheCoreFromFamilyAndModel) {
  const bool intel = true, amd = true;
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0x01), "Zen 3");   // EPYC 7003 (Milan)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0x21), "Zen 3");   // Ryzen 5000 (Vermeer)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0x11), "Zen 4");   // EPYC 9004 (Genoa)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0x61), "Zen 4");   // Ryzen 7000 (Raphael)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0xa0), "Zen 4c");  // EPYC 97x4 (Bergamo)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 23, 0x31), "Zen 2");   // EPYC 7002 (Rome)
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 26, 0x02), "Zen 5");
  EXPECT_EQ(qkv::microarchitecture_name(intel, !amd, 6, 0x8f), "Sapphire Rapids");
  EXPECT_EQ(qkv::microarchitecture_name(intel, !amd, 6, 0xcf), "Emerald Rapids");
  EXPECT_EQ(qkv::microarchitecture_name(intel, !amd, 6, 0x6a), "Ice Lake-SP");
  // Unknown pairs and vendors get no name (the description then gives the numbers alone).
  EXPECT_EQ(qkv::microarchitecture_name(intel, !amd, 6, 0x3c), "");
  EXPECT_EQ(qkv::microarchitecture_name(!intel, amd, 25, 0x90), "");
  EXPECT_EQ(qkv::microarchitecture_name(!intel, !amd, 25, 0x01), "");
}

TEST(CpuFeatures, DescriptionHasTheBrandAndTheCore) {
  qkv::CpuFeatures f;
  f.model = "AMD EPYC";
  f.amd = true;
  f.family = 25, f.model_number = 1, f.microarchitecture = "Zen 3";
  EXPECT_EQ(f.description(), "AMD EPYC (Zen 3: family 25, model 1)");
  f.model_number = 0x90, f.microarchitecture = "";
  EXPECT_EQ(f.description(), "AMD EPYC (family 25, model 144)");
  f.family = 0;  // no CPUID leaf 1: the brand alone
  EXPECT_EQ(f.description(), "AMD EPYC");
  // This machine's: its brand and numbers, and a name wherever the table knows the pair.
  const qkv::CpuFeatures& here = qkv::cpu_features();
  EXPECT_GT(here.family, 0);
  EXPECT_EQ(here.microarchitecture, qkv::microarchitecture_name(here.intel, here.amd, here.family, here.model_number));
  EXPECT_EQ(here.description().rfind(here.model, 0), 0u);
}

// The baseline gate (cli/cpu_gate.cpp) names each instruction set of x86-64-v3 a CPU lacks.
TEST(CpuBaseline, NamesWhatACpuLacks) {
  qkv::CpuidWords all;
  all.leaf1_ecx = (1u << 12) | (1u << 22) | (1u << 27) | (1u << 28) | (1u << 29);  // FMA MOVBE OSXSAVE AVX F16C
  all.leaf7_ebx = (1u << 3) | (1u << 5) | (1u << 8);                              // BMI1 AVX2 BMI2
  all.ext1_ecx = 1u << 5;                                                          // LZCNT
  all.xcr0 = 0x7;                                                                  // x87, XMM, YMM saved
  char out[160];
  EXPECT_STREQ(qkv::missing_baseline_features(all, out, sizeof out), "");
  qkv::CpuidWords no_avx2 = all;
  no_avx2.leaf7_ebx &= ~(1u << 5);
  EXPECT_STREQ(qkv::missing_baseline_features(no_avx2, out, sizeof out), "AVX2");
  qkv::CpuidWords sandy_bridge = all;  // AVX without AVX2, FMA, BMI, F16C, LZCNT, MOVBE
  sandy_bridge.leaf1_ecx = (1u << 27) | (1u << 28);
  sandy_bridge.leaf7_ebx = 0, sandy_bridge.ext1_ecx = 0;
  EXPECT_STREQ(qkv::missing_baseline_features(sandy_bridge, out, sizeof out),
               "AVX2, FMA, F16C, BMI1, BMI2, LZCNT, MOVBE");
  qkv::CpuidWords os_off = all;  // the CPU has AVX, the OS does not save its registers
  os_off.xcr0 = 0x3;
  EXPECT_STREQ(qkv::missing_baseline_features(os_off, out, sizeof out), "AVX (the OS does not enable it)");
  char small[8];  // names that do not fit are left out, never overrun
  EXPECT_STREQ(qkv::missing_baseline_features(sandy_bridge, small, sizeof small), "AVX2");
  // This machine runs qkv's tests, so it has them all.
  EXPECT_STREQ(qkv::missing_baseline_features(qkv::read_cpuid_words(), out, sizeof out), "");
}

}  // namespace
