// Progress output for long jobs: a line per update with elapsed time and ETA.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace qkv::cli {

std::string format_duration(double seconds);  // "1:02:03" or "2:03"

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
