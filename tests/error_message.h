// The message of the qkv::Error a call throws, for tests that compare whole messages (what a user
// reads).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

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

// Expects an error's message (empty: none was thrown) to contain each of `parts`.
inline void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  EXPECT_FALSE(message.empty()) << "no error thrown";
  for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "\"" << p << "\" not in: " << message;
}

}  // namespace qkv::test_support
