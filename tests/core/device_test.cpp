// Devices by name, and what asking for a GPU says where none can be used: a build without CUDA,
// or a CUDA build on a machine without a GPU (CI's), answers with a qkv::Error naming the device
// and the reason, never a crash. And the host CPU: its core named from CPUID's family and model,
// which tell a Zen 3 from a Zen 4 whose AVX-512 a hypervisor hides (their flags and "AMD EPYC" brand
// are alike), and the x86-64-v3 baseline's check (cli/cpu_gate.cpp).
#include <gtest/gtest.h>

#include <string>

#include "qkv/core/cpu_baseline.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/core/tensor.h"

namespace qkv {
namespace {

TEST(DeviceNames, ParseAndPrint) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(3).name(), "cuda:3");
  EXPECT_EQ(Device::cpu().name(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:99", "CPU", ""}) {
    try {
      (void)parse_device(bad);
      ADD_FAILURE() << "'" << bad << "' must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

// Without a usable GPU, placing a tensor there says why; with one, it works.
TEST(DeviceNames, AGpuThatCannotBeUsedIsAClearError) {
  const Tensor x = Tensor::full(Dims{2, 3}, 1.5f);
  if (cuda::device_count() > 0) {
    EXPECT_EQ(x.to(Device::cuda(0)).to(Device::cpu()).to_vector(), x.to_vector());
    const Device past = Device::cuda(cuda::device_count());
    try {
      (void)x.to(past);
      ADD_FAILURE() << "a device index past the last GPU must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
    return;
  }
  try {
    (void)x.to(Device::cuda(0));
    ADD_FAILURE() << "no GPU can be used here";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find(cuda::kBuilt ? "no CUDA GPU is visible" : "built without CUDA"), std::string::npos) << what;
  }
  EXPECT_THROW((void)Tensor::empty(Dims{4}, DType::F32, Device::cuda(0)), Error);
}

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
}  // namespace qkv
