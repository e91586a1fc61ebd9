// Device: where a tensor's storage lives: the host CPU, or a CUDA GPU (in a build with
// -DQKV_CUDA=ON; core/cuda_runtime.h). Each device has its own pool (buffer_pool.cpp), and ops
// dispatch on it (ops/dispatch.h); nothing above ops/ looks at it except to place tensors.
#pragma once
#include <cstdint>
#include <string>

namespace qkv {

enum class DeviceType : uint8_t { CPU, CUDA };
inline constexpr int kDeviceTypes = 2;
// Devices of one type a process can address (CUDA ordinals 0..15).
inline constexpr int kMaxDevicesPerType = 16;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  // "cpu", "cuda:0".
  std::string name() const;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N" -> Device; anything else throws naming the text. Whether
// the device exists is not checked here (cuda::check_available).
Device parse_device(const std::string& text);

}  // namespace qkv
