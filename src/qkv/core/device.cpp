#include "qkv/core/device.h"

#include <cctype>

#include "qkv/core/error.h"

namespace qkv {

std::string Device::name() const {
  if (type == DeviceType::CPU) return "cpu";
  std::string name = std::to_string(index);
  name.insert(0, "cuda:");
  return name;
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && text.size() <= prefix.size() + 2) {
    int index = 0;
    for (size_t i = prefix.size(); i < text.size(); ++i) {
      QKV_CHECK(std::isdigit(static_cast<unsigned char>(text[i])), "unknown device '" << text << "'");
      index = index * 10 + (text[i] - '0');
    }
    QKV_CHECK(index < kMaxDevicesPerType, "device '" << text << "': qkv addresses CUDA devices 0 to "
                                                     << kMaxDevicesPerType - 1);
    return Device::cuda(index);
  }
  QKV_CHECK(false, "unknown device '" << text << "' (expected cpu, cuda or cuda:N)");
  return {};
}

}  // namespace qkv
