// qkv::InvalidArgumentsError and QKV_CHECK_ARGS: a request's options that cannot go together (kept
// apart from core/error.h, which nearly every file includes).
#pragma once
#include <sstream>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

// Options that cannot go together, or one that is missing, in a request to the library (train's flags
// and the like): the caller's mistake rather than bad data, so front ends map it to their usage error
// (the CLI's exit code 2; Python's ValueError, as every Error).
class InvalidArgumentsError : public Error {
 public:
  explicit InvalidArgumentsError(const std::string& what) : Error(what) {}
};

}  // namespace qkv

// QKV_CHECK_ARGS(cond, msg): as QKV_CHECK, throwing qkv::InvalidArgumentsError.
#define QKV_CHECK_ARGS(cond, msg)                          \
  do {                                                     \
    if (!(cond)) {                                         \
      std::ostringstream qkv_check_os_;                    \
      qkv_check_os_ << msg;                                \
      throw ::qkv::InvalidArgumentsError(qkv_check_os_.str()); \
    }                                                      \
  } while (0)
