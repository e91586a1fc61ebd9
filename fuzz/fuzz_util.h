// Helpers shared by the libFuzzer targets in this directory.
//
// Contract of every target: an input the code under test legitimately refuses must raise
// qkv::Error, which the target catches. Anything else is a finding that libFuzzer saves as a
// crash: a sanitizer report, another exception type escaping (std::terminate), a failed
// invariant (fuzz_require aborts), a hang (-timeout) or a huge allocation (-rss_limit_mb).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::fuzz {

// A failed invariant: print what broke and abort, so libFuzzer records the input.
[[noreturn]] inline void fuzz_fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n", file, line, what);
  std::abort();
}
#define QKV_FUZZ_REQUIRE(cond) \
  ((cond) ? (void)0 : ::qkv::fuzz::fuzz_fail(#cond, __FILE__, __LINE__))

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A per-process scratch file (readers under test take paths), in $QKV_FUZZ_SCRATCH (set by
// scripts/fuzz.sh, which removes the directory afterwards), else /dev/shm to keep the per-input
// writes off the disk, else /tmp.
inline std::string scratch_path(const std::string& tag) {
  const char* chosen = std::getenv("QKV_FUZZ_SCRATCH");
  std::string dir = chosen != nullptr ? chosen : "/dev/shm";
  if (chosen == nullptr && ::access(dir.c_str(), W_OK) != 0) dir = "/tmp";
  return dir + "/qkv_fuzz_" + std::to_string(::getpid()) + "_" + tag;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();  // a broken harness, not a finding in the code under test
  }
}

// Splits `text` at each NUL byte into at most `max_parts` parts (the last keeps any further
// NULs), so one fuzz input can carry several files or texts.
inline std::vector<std::string_view> split_at_nul(std::string_view text, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t nul = text.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(text.substr(0, nul));
    text.remove_prefix(nul + 1);
  }
  parts.push_back(text);
  return parts;
}

}  // namespace qkv::fuzz
