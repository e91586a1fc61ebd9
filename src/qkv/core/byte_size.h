// Sizes in bytes as people write them on a command line: "2G", "1500M", "512MiB", "3.5GB",
// "1073741824" (bytes), "0". K, M, G and T are powers of 1024; a trailing B, and an i before it, are
// optional. Shared by the flags that take one (train's and serve's --max-memory).
#pragma once
#include <cstdint>
#include <string>

namespace qkv {

// The bytes `text` says, or a qkv::Error whose message says why not in words that follow the text
// quoted ("is not a size", "has an unknown unit", "is not a non-negative size", "is too large"):
// the caller prefixes the flag and the text, and adds what it expected.
int64_t parse_byte_size(const std::string& text);

}  // namespace qkv
