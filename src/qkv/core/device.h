// Device: where a tensor's storage lives. Only the host CPU today; a CUDA backend adds a type, its
// allocator (buffer_pool.cpp) and its ops' cases, and nothing above ops/ changes.
#pragma once
#include <cstdint>
#include <string>

namespace qkv {

enum class DeviceType : uint8_t { CPU };
inline constexpr int kDeviceTypes = 1;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  bool operator==(const Device&) const = default;
  // "cpu" (a CUDA device would read "cuda:0").
  std::string name() const;
};

}  // namespace qkv
