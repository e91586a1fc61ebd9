// CLI11 validators for qkv's flags. CLI11's own Range lets NaN through (every comparison with NaN
// is false), so numeric flags use these instead: a rejected value is a usage error (exit 2) whose
// message names the flag.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "qkv/core/byte_size.h"
#include "qkv/core/error.h"
#include "qkv/train/memory_budget.h"

namespace qkv::cli {

// Shortest text that reads back as `v`: 1048576, not 1.04858e+06.
inline std::string format_bound(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// Accepts finite numbers in [lo, hi] (either bound may be infinite to mean "none"). `what` words
// the range in messages and help ("positive"); by default "in [lo, hi]".
inline CLI::Validator FiniteRange(double lo, double hi, const std::string& what = "") {
  const std::string range = "in [" + format_bound(lo) + ", " + format_bound(hi) + "]";
  std::ostringstream desc;
  desc << (what.empty() ? range : what);
  return CLI::Validator(
      [lo, hi, what, range](std::string& s) -> std::string {
        double v = 0;
        std::istringstream is(s);
        is >> v;
        if (!is || !is.eof()) return "expected a number, got '" + s + "'";
        if (!std::isfinite(v)) return "must be a finite number, got '" + s + "'";
        if (v < lo || v > hi) {
          std::ostringstream os;
          if (!what.empty()) {
            os << "must be " << what << ", got " << s;
          } else {
            os << "must be " << range << ", got " << s;
          }
          return os.str();
        }
        return {};
      },
      desc.str());
}

inline CLI::Validator Positive() {
  return FiniteRange(std::numeric_limits<double>::min(), std::numeric_limits<double>::infinity(), "positive");
}
inline CLI::Validator NonNegative() {
  return FiniteRange(0, std::numeric_limits<double>::infinity(), ">= 0");
}
inline CLI::Validator Probability() { return FiniteRange(0, 1, "in [0, 1]"); }
// Probabilities a dropout layer accepts: [0, 1).
inline CLI::Validator DropoutProbability() {
  return FiniteRange(0, std::nextafter(1.0, 0.0), "in [0, 1)");
}

// --max-memory's sizes, refused at parse time (a usage error naming the flag): as
// train::parse_memory_size reads them (auto, 0, or at least 1M) where `for_training`, else any size
// parse_byte_size reads (0: no limit).
inline CLI::Validator MemorySize(bool for_training = true) {
  return CLI::Validator(
      [for_training](std::string& s) -> std::string {
        try {
          if (for_training) {
            train::parse_memory_size(s);
          } else {
            parse_byte_size(s);
          }
        } catch (const Error& e) {
          const std::string m = e.what(), prefix = "--max-memory: ";
          if (!for_training) return "'" + s + "' " + m + " (expected 0 for no limit, or a size such as 2G, 1500M or 512MiB)";
          return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
        }
        return {};
      },
      "SIZE");
}

}  // namespace qkv::cli
