// BERT's masked-LM corruption of one sequence (Devlin et al. 2019, create_pretraining_data.py):
// of the sequence's candidate tokens (every token that is not special: [CLS], [SEP], padding,
// [MASK], ...), round(15%) are chosen (at least one when there is a candidate), without
// replacement; each chosen token becomes [MASK] with probability 0.8, a random non-special token
// with 0.1, and stays itself with 0.1. The label of a chosen position is its original id, -1
// elsewhere.
//
// The draws are a pure function of (seed, key1, key2, the ids): a counter-based hash, no hidden
// state. Training keys them by (epoch, block), so every epoch masks a block afresh (RoBERTa's
// dynamic masking) and a resumed run masks exactly as an uninterrupted one; validation keys them
// by (0, block) with a fixed seed, so every validation scores the same positions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qkv::train {

struct MaskingOptions {
  double probability = 0.15;  // share of the candidates chosen
  double mask_share = 0.8;    // of the chosen: -> [MASK]
  double random_share = 0.1;  // of the chosen: -> a random non-special token (the rest keep theirs)
  int32_t mask_id = -1;
  int64_t vocab_size = 0;
  std::vector<int32_t> specials;  // never chosen and never drawn as a replacement (mask_id is added)
};

struct MaskedSequence {
  std::vector<int32_t> ids;     // the corrupted input
  std::vector<int32_t> labels;  // the original id where chosen, -1 elsewhere
};

class Masker {
 public:
  // Throws qkv::Error when the options are out of range (naming the field).
  explicit Masker(MaskingOptions options);
  MaskedSequence mask(const std::vector<int32_t>& ids, uint64_t seed, uint64_t key1, uint64_t key2) const;
  bool special(int32_t id) const { return id < 0 || id >= options_.vocab_size || special_[static_cast<size_t>(id)]; }
  const MaskingOptions& options() const { return options_; }

 private:
  MaskingOptions options_;
  std::vector<bool> special_;  // by id
};

}  // namespace qkv::train
