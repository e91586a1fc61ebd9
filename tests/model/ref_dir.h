// Locates reference data written by tests/python/make_*_refs.py (a CTest fixture).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// CI runs `CI=true bash .ci/run`: there a reduced reference (a generated stand-in for the KJV, a
// variant left out for want of its package) is a failure, not a skip.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// A tokenizer reference's training text (make_bpe_refs.training_lines) must not shrink quietly:
// `corpus_lines` lines, the KJV's 12,092 verses when `corpus` says "kjv" (always under CI=true),
// else 6000 generated lines.
inline void expect_reference_corpus(const std::string& train_txt, const std::string& corpus, size_t corpus_lines) {
  std::ifstream in(ref_path(train_txt));
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, corpus_lines) << train_txt;
  if (corpus == "kjv") {
    EXPECT_EQ(lines, 12092u) << train_txt << ": the KJV's Genesis..Deuteronomy, Psalms, Matthew..John";
  } else {
    EXPECT_EQ(corpus, "generated") << train_txt;
    EXPECT_EQ(lines, 6000u) << train_txt;
    EXPECT_FALSE(in_ci()) << "CI=true: " << train_txt << " was trained on generated text, not the KJV "
                          << "(apt-get install diatheke sword-text-kjv)";
  }
}

}  // namespace qkv::testing
