// Language-model training data: the lines of a text, each followed by EOS, concatenated into one
// token stream and cut into blocks of block_size + 1 consecutive tokens (block i starts at token
// i * block_size, so block i's last token is block i+1's first: every token is a label once and
// nothing is padding). A batch is `batch_size` blocks; the block order is shuffled every epoch from
// (seed, epoch), so a resumed run sees exactly the batches an uninterrupted one would.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/train/training_data.h"

namespace qkv::train {

// [bos] line0 [eos] line1 [eos] ...: the stream a decoder-only model is trained on (bos = -1: none).
std::vector<int32_t> pack_lines(const std::vector<data::IdLine>& lines, int32_t bos_id, int32_t eos_id);
// Blocks of block_size + 1 tokens overlapping by one; with keep_tail the last, shorter block (at
// least 2 tokens) is kept too (validation scores every token), else it is dropped.
std::vector<data::IdLine> cut_blocks(const std::vector<int32_t>& stream, int64_t block_size, bool keep_tail);

class LanguageModelData final : public TrainingData {
 public:
  // Throws qkv::Error when the stream is too short for one block.
  LanguageModelData(const std::vector<int32_t>& stream, int64_t block_size, int64_t batch_size, uint64_t seed);
  std::string kind() const override { return "language-model"; }
  data::Batch next() override;  // tgt (B, block_size + 1); src undefined
  int64_t epoch() const override { return epoch_; }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state, int64_t step) override;

  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t batches_per_epoch() const { return (blocks() + batch_size_ - 1) / batch_size_; }
  int64_t block_size() const { return block_size_; }

 private:
  void shuffle_for_epoch();
  std::vector<data::IdLine> blocks_;
  std::vector<int64_t> order_;
  int64_t block_size_, batch_size_;
  uint64_t seed_;
  int64_t epoch_ = 0, index_ = 0;  // next batch: blocks order_[index_ * batch_size_ ...]
};

}  // namespace qkv::train
