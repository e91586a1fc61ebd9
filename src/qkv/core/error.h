// qkv's one exception type and the check macro every layer uses for bad input.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

// Thrown for any user-facing failure: wrong shapes, bad ids, bad files. The message names what was
// wrong and where (op name, both shapes, file and line), so the CLI can print it and exit non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A file or directory the caller named does not exist (front ends map it to their own kind, e.g.
// Python's FileNotFoundError); the message names the path.
class NotFoundError : public Error {
 public:
  explicit NotFoundError(const std::string& what) : Error(what) {}
};

// Memory ran out (the host's, or a GPU's): the same work may succeed later or smaller, so front ends
// map it apart from bad input (the server: 503 with Retry-After; Python: MemoryError). The message
// names the size asked and, on a GPU, what was free.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

// A device failed (a CUDA call or kernel): not the input's fault, so front ends map it apart from
// bad input (the server: 500, code device_error). A fault the GPU keeps (an illegal address, an
// ECC error) fails every later call of the process: cuda::device_fault says so, the server's
// /health answers 503.
class DeviceError : public Error {
 public:
  explicit DeviceError(const std::string& what) : Error(what) {}
};

}  // namespace qkv

// QKV_CHECK(cond, "op: " << a << " vs " << b): throws qkv::Error with the streamed message.
#define QKV_CHECK(cond, msg)                 \
  do {                                       \
    if (!(cond)) {                           \
      std::ostringstream qkv_check_os_;      \
      qkv_check_os_ << msg;                  \
      throw ::qkv::Error(qkv_check_os_.str()); \
    }                                        \
  } while (0)
