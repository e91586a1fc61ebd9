// Atomic file replacement: write a temporary file beside the target, fsync, rename over it.
// A crash mid-write leaves the old file intact, never a truncated one.
#pragma once
#include <string>

namespace qkv::io {

void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace qkv::io
