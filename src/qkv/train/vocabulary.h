// The SentencePiece vocabulary of a training run: trained once from the run's training text into
// OUT/spm.model, then used to encode every line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::train {

struct VocabularyOptions {
  int vocab_size = 8000;
  std::string model_type = "unigram";
  int64_t sample_lines = 0;  // lines sampled to train SentencePiece (0 = all)
  uint64_t seed = 0;
  std::vector<std::string> user_defined_symbols;  // e.g. [CLS] [SEP] [MASK], ids 4, 5, 6
};

// Trains on the lines of `texts` (all of them, one corpus) and writes `spm_path` (and the .vocab
// beside it). SentencePiece writes PREFIX.model in place, so it trains under a temporary prefix in
// `work_dir` and the result is renamed: a kill during training never leaves a half-written model
// that a later run would pick up.
void train_vocabulary(const std::vector<const std::vector<std::string>*>& texts, const std::string& work_dir,
                      const VocabularyOptions& options, const std::string& spm_path);
// Earlier runs killed during vocabulary training leave spm.training-PID.* files behind in `dir`.
void remove_stale_vocabulary_files(const std::string& dir);
// Every line encoded (in parallel).
std::vector<data::IdLine> encode_all(const text::SentencePiece& spm, const std::vector<std::string>& lines);

}  // namespace qkv::train
