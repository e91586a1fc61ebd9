// Writes tiny SentencePiece models into a directory, as the seed corpus of
// fuzz_sentencepiece_load (so no binary model is checked in). Usage: fuzz_make_spm_seeds DIR
// One model per model type with identity normalization (a few KB each, cheap to mutate) and one
// qkv-trained model (nmt_nfkc normalization, byte fallback), as `qkv train` writes them.
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/sentencepiece.h"

namespace {

const std::vector<std::string> kSentences = {
    "the quick brown fox jumps over the lazy dog",
    "el niño come una manzana en la mañana",
    "¿qué tal? muy bien, gracias.",
    "a small city by the river",
    "el pingüino está en el árbol",
    "reading books in the garden every evening",
};

// Feeds training lines to SentencePiece from memory.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return next_ >= lines_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return lines_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t next_ = 0;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw qkv::Error("cannot write " + path);
}

std::string train_identity_model(const std::string& model_type, int vocab_size) {
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", model_type},        {"vocab_size", std::to_string(vocab_size)},
      {"normalization_rule_name", "identity"}, {"character_coverage", "1.0"},
      {"hard_vocab_limit", "false"},     {"minloglevel", "2"},
      {"num_threads", "1"},
  };
  std::vector<std::string> lines;
  for (int repeat = 0; repeat < 20; ++repeat) lines.insert(lines.end(), kSentences.begin(), kSentences.end());
  LineIterator source(lines);
  std::string serialized;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &source, &serialized);
  if (!status.ok()) throw qkv::Error(model_type + " seed model: " + status.ToString());
  return serialized;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    for (const char* type : {"unigram", "bpe", "char", "word"})
      write_bytes(dir + "/seed_" + type + ".model", train_identity_model(type, 60));
    const std::string text_path = dir + "/spm_text.tmp";
    std::string text;
    for (const std::string& s : kSentences) text += s + "\n";
    write_bytes(text_path, text);
    qkv::text::SpmTrainOptions options;
    options.vocab_size = 300;
    qkv::text::train_sentencepiece({text_path}, dir + "/seed_qkv", options);
    std::remove(text_path.c_str());
    std::remove((dir + "/seed_qkv.vocab").c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_spm_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
