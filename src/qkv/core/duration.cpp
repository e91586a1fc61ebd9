#include "qkv/core/duration.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "qkv/core/error.h"

namespace qkv {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

double parse_duration(const std::string& text) {
  const auto fail = [&text]() {
    throw Error("duration '" + text + "': expected e.g. 2h, 90m, 45s, 1h55m or a number of seconds");
  };
  if (text.empty()) fail();
  double total = 0;
  int last_unit_rank = 4;  // h = 3, m = 2, s = 1: units must strictly decrease
  size_t pos = 0;
  while (pos < text.size()) {
    // strtod would accept "inf", "nan", hex and a sign; a duration is digits with one optional point.
    const size_t start = pos;
    bool digits = false, point = false;
    while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || (text[pos] == '.' && !point))) {
      if (text[pos] == '.') point = true; else digits = true;
      ++pos;
    }
    if (!digits) fail();
    const double value = std::strtod(text.substr(start, pos - start).c_str(), nullptr);
    if (pos == text.size()) {  // a trailing bare number is seconds, allowed only alone
      if (start != 0) fail();
      return value;
    }
    const char unit = text[pos++];
    const int rank = unit == 'h' ? 3 : unit == 'm' ? 2 : unit == 's' ? 1 : 0;
    if (rank == 0 || rank >= last_unit_rank) fail();
    last_unit_rank = rank;
    total += value * (rank == 3 ? 3600 : rank == 2 ? 60 : 1);
  }
  return total;
}

}  // namespace qkv
