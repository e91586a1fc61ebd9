// A file's whole contents, for tests that compare files byte for byte.
#pragma once
#include <fstream>
#include <iterator>
#include <string>

namespace qkv::test_support {

// The bytes of `path`; empty when it cannot be read (the comparison that follows then fails).
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace qkv::test_support
