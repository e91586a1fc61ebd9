#include "qkv/core/byte_size.h"

#include <cctype>
#include <cmath>

#include "qkv/core/error.h"

namespace qkv {

int64_t parse_byte_size(const std::string& text) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    throw Error("is not a size");
  }
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();   // GB, MB
  if (unit.size() == 2 && unit.back() == 'I') unit.pop_back();  // Gi (GiB)
  const std::string units = "KMGT";
  double scale = 1;
  if (unit == "B" || unit.empty())
    scale = 1;
  else if (unit.size() == 1 && units.find(unit[0]) != std::string::npos)
    scale = std::pow(1024.0, static_cast<double>(units.find(unit[0]) + 1));
  else
    throw Error("has an unknown unit");
  if (!std::isfinite(value) || value < 0) throw Error("is not a non-negative size");
  const double bytes = value * scale;
  if (bytes >= 9.2e18) throw Error("is too large");
  return static_cast<int64_t>(bytes);
}

}  // namespace qkv
