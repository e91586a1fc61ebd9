// Training data of encoder-only models.
//
// Masked LM: the lines of a text, each followed by [SEP], concatenated into one token stream and
// cut into chunks of block_size - 2 tokens; each block is [CLS] chunk [SEP], so every block has
// exactly block_size tokens and nothing is padding (RoBERTa's FULL-SENTENCES packing, with BERT's
// specials). A batch is `batch_size` blocks, masked by train/masking.h keyed by (epoch, block);
// the block order is shuffled every epoch from (seed, epoch). Both make resume exact.
//
// Classification: labelled lines "label<TAB>text". A batch is `batch_size` sentences ([CLS] ...
// [SEP], padded with pad_id to the longest), in an order shuffled every epoch from (seed, epoch).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/train/masking.h"
#include "qkv/train/training_data.h"

namespace qkv::train {

// Blocks of [CLS] + block_size - 2 stream tokens + [SEP]; with keep_tail the last, shorter block
// is kept too (validation scores every token), else dropped. block_size must be at least 3.
std::vector<data::IdLine> mlm_blocks(const std::vector<data::IdLine>& lines, int64_t block_size, int32_t cls_id,
                                     int32_t sep_id, bool keep_tail);

// Rows (B, T) of `rows`, right-padded with `pad` to the longest.
Tensor pad_rows(const std::vector<const data::IdLine*>& rows, int32_t pad);

// Which items each batch takes: `items` in an order shuffled from (seed, epoch), `batch_size` at a
// time (the last batch of an epoch may be smaller). The position (epoch, index) is what
// train_state.json saves.
class EpochPlan {
 public:
  EpochPlan(int64_t items, int64_t batch_size, uint64_t seed);
  // The items of the next batch; advances the position (epoch() is then that of the batch after).
  std::vector<int64_t> next();
  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }
  int64_t batches_per_epoch() const { return (items_ + batch_size_ - 1) / batch_size_; }
  nlohmann::json state() const;
  // `what` names the items in messages ("blocks", "sentences").
  void restore(const nlohmann::json& state, const char* what);

 private:
  void shuffle();
  int64_t items_, batch_size_;
  uint64_t seed_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, index_ = 0;
};

class MaskedLmData final : public TrainingData {
 public:
  // Throws qkv::Error when there are no blocks.
  MaskedLmData(std::vector<data::IdLine> blocks, Masker masker, int64_t batch_size, uint64_t seed);
  std::string kind() const override { return "masked-lm"; }
  data::Batch next() override;  // tgt: corrupted ids (B, block_size); labels (B, block_size)
  int64_t epoch() const override { return plan_.epoch(); }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state, int64_t step) override;
  const Objective& objective() const override { return masked_lm(); }

  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t batches_per_epoch() const { return plan_.batches_per_epoch(); }

 private:
  std::vector<data::IdLine> blocks_;
  Masker masker_;
  uint64_t seed_;
  EpochPlan plan_;
};

// One line of a labelled file.
struct LabelledLine {
  std::string label, text;
  int64_t line = 0;  // 1-based line number in its file
};
// "label<TAB>text" lines (the text may hold further tabs); blank lines are skipped. A line without
// a tab or with an empty label is an error naming file:line.
std::vector<LabelledLine> read_labelled(const std::string& path);
// The distinct labels, sorted (byte order).
std::vector<std::string> collect_labels(const std::vector<LabelledLine>& lines);
// The index of each line's label in `labels`; a label not there is an error naming path:line.
std::vector<int32_t> label_indices(const std::vector<LabelledLine>& lines, const std::vector<std::string>& labels,
                                   const std::string& path);

class ClassificationData final : public TrainingData {
 public:
  // rows: [CLS] ... [SEP] ids; labels: one index per row. Throws qkv::Error when empty.
  ClassificationData(std::vector<data::IdLine> rows, std::vector<int32_t> labels, int32_t pad_id, int64_t batch_size,
                     uint64_t seed);
  std::string kind() const override { return "classification"; }
  data::Batch next() override;  // tgt (B, longest row) padded with pad_id; labels (B)
  int64_t epoch() const override { return plan_.epoch(); }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state, int64_t step) override;
  const Objective& objective() const override { return classification(); }

  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  int64_t batches_per_epoch() const { return plan_.batches_per_epoch(); }

 private:
  std::vector<data::IdLine> rows_;
  std::vector<int32_t> labels_;
  int32_t pad_id_;
  EpochPlan plan_;
};

}  // namespace qkv::train
