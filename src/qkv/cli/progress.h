// Progress output for long jobs: a line per update with the rate and the time left.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

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

// "translated 120/1000 sentences, 35.2 sentences/s, ETA 0:25": `done` of `total` items after
// `seconds`, the ETA at the rate so far ("?" while nothing is done yet).
inline std::string progress_text(const std::string& verb, int64_t done, int64_t total, const std::string& unit,
                                 double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : -1.0;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, " %lld/%lld ", static_cast<long long>(done), static_cast<long long>(total));
  char speed[64];
  std::snprintf(speed, sizeof speed, ", %.1f ", rate);
  return verb + numbers + unit + speed + unit + "/s, ETA " + format_duration(eta);
}

// A job's progress on stderr (or `out`), as progress_text words it. On a terminal the line is
// redrawn in place at every update. Elsewhere (a log file, a pipe) a line is written at most every
// `interval` seconds, and the last one (done == total) always: a log of a long job gets a record
// every few seconds, not one line per batch. Quiet: nothing at all.
class ProgressLine {
 public:
  ProgressLine(std::string verb, std::string unit, bool quiet, bool tty = ::isatty(STDERR_FILENO) != 0,
               double interval = 2.0, std::FILE* out = stderr)
      : verb_(std::move(verb)), unit_(std::move(unit)), quiet_(quiet), tty_(tty), interval_(interval), out_(out) {}

  void update(int64_t done, int64_t total) {
    if (quiet_) return;
    const double now = clock_.seconds();
    if (!tty_ && done < total && now - last_written_ < interval_) return;
    last_written_ = now;
    const std::string text = progress_text(verb_, done, total, unit_, now);
    // On a terminal a few spaces clear what a longer previous line left (an ETA of 1:00:00 before 59:59).
    std::fprintf(out_, tty_ ? "\r%s   " : "%s\n", text.c_str());
    std::fflush(out_);
    open_line_ = tty_;
  }

  // Wipes the terminal's line, for output to the same terminal; the next update draws it again.
  void clear() {
    if (open_line_) std::fprintf(out_, "\r\33[K");
    std::fflush(out_);
    open_line_ = false;
  }

  // Ends the terminal's line, so that what is written next starts on its own.
  void finish() {
    if (open_line_) std::fprintf(out_, "\n");
    open_line_ = false;
  }

  double seconds() const { return clock_.seconds(); }

 private:
  std::string verb_, unit_;
  bool quiet_, tty_;
  double interval_;
  std::FILE* out_;
  Stopwatch clock_;
  double last_written_ = 0;
  bool open_line_ = false;
};

}  // namespace qkv::cli
