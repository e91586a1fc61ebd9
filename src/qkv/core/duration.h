// Durations for people: formatting for progress lines, parsing for flags like --time-budget.
#pragma once
#include <string>

namespace qkv {

// "2:03" or "1:02:03"; "?" for unknown (negative or not finite).
std::string format_duration(double seconds);

// Seconds from "2h", "90m", "45s", "1h55m", "1h30m15s", "1.5h" or a plain number of seconds.
// Units must appear largest first, each at most once. Throws qkv::Error naming `text` otherwise.
double parse_duration(const std::string& text);

}  // namespace qkv
