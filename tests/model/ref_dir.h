// Locates reference data written by tests/python/make_*_refs.py (a CTest fixture).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace qkv::testing {

// $QKV_REF_DIR, or else the build's ref/ (QKV_DEFAULT_REF_DIR); null when neither is set.
inline const char* ref_dir() {
  const char* env = std::getenv("QKV_REF_DIR");
#ifdef QKV_DEFAULT_REF_DIR
  return env && *env ? env : QKV_DEFAULT_REF_DIR;
#else
  return env;
#endif
}

// The path of `name` under $QKV_REF_DIR, or else under the build's ref/ (QKV_DEFAULT_REF_DIR);
// fails the test (not skips) when absent: CTest runs the reference scripts first, and running the
// binary by hand needs `ctest -R ref.` once.
inline std::string ref_path(const std::string& name) {
  const char* dir = ref_dir();
  if (!dir) {
    ADD_FAILURE() << "QKV_REF_DIR is not set: run through ctest (it generates the PyTorch references first)";
    return "";
  }
  const std::string path = std::string(dir) + "/" + name;
  if (!std::filesystem::exists(path)) ADD_FAILURE() << path << " is missing: run `ctest -R ref.` to generate it";
  return path;
}

}  // namespace qkv::testing
