// The message of the qkv::Error a call throws, for tests that compare whole messages (what a user
// reads).
#pragma once
#include <string>
#include <utility>

#include "qkv/core/error.h"

namespace qkv::test_support {

// f()'s qkv::Error message, or `if_none` when f returns normally.
template <class F>
std::string error_message_of(F&& f, std::string if_none = "") {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return if_none;
}

}  // namespace qkv::test_support
