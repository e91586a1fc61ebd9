// Devices by name, and what asking for a GPU says where none can be used: a build without CUDA,
// or a CUDA build on a machine without a GPU (CI's), answers with a qkv::Error naming the device
// and the reason, never a crash.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace qkv
