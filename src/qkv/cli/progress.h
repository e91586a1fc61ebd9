// Progress output for long jobs: a line per update with elapsed time and ETA.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "qkv/core/duration.h"

namespace qkv::cli {

using qkv::format_duration;

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace qkv::cli
