// Human-readable durations for progress lines: "2:03" or "1:02:03"; "?" for unknown.
#pragma once
#include <string>

namespace qkv {

std::string format_duration(double seconds);

}  // namespace qkv
