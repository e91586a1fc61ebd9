// A small generated parallel text for tests that train: "Spanish" lines of random syllable words and
// "English" lines of the same words in reverse order, learnable but not trivial. Every tenth pair
// goes to dev.{es,en}, the rest to train.{es,en}.
#pragma once
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace qkv::testing {

inline void write_toy_corpus(const std::string& dir, int lines, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const char* syl[] = {"la", "me", "ño", "ti", "sa", "ro", "qué", "du", "ven", "cas", "pol", "mi", "za", "gue", "bri"};
  std::mt19937_64 eng(seed);
  std::ofstream es(dir + "/train.es"), en(dir + "/train.en"), des(dir + "/dev.es"), den(dir + "/dev.en");
  for (int i = 0; i < lines; ++i) {
    std::string s, t;
    const int words = 3 + static_cast<int>(eng() % 6);
    for (int w = 0; w < words; ++w) {
      std::string word;
      for (int k = 0, n = 1 + static_cast<int>(eng() % 3); k < n; ++k) word += syl[eng() % 15];
      s += (w ? " " : "") + word;
      t = word + (w ? " " : "") + t;
    }
    (i % 10 == 0 ? des : es) << s << "\n";
    (i % 10 == 0 ? den : en) << t << "\n";
  }
}

}  // namespace qkv::testing
