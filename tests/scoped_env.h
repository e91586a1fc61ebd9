// An environment variable set for a scope, unset at its end whatever happens in between: a kernel's
// other form, chosen by its variable, checked (tests/cuda) or timed (bench/bench_gpu_ops) beside the
// default.
#pragma once
#include <cstdlib>

namespace qkv::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace qkv::testing
