#include "qkv/train/lm_data.h"

#include <algorithm>
#include <random>

#include "qkv/core/error.h"

namespace qkv::train {

std::vector<int32_t> pack_lines(const std::vector<data::IdLine>& lines, int32_t bos_id, int32_t eos_id) {
  std::vector<int32_t> stream;
  if (bos_id >= 0) stream.push_back(bos_id);
  for (const data::IdLine& l : lines) {
    stream.insert(stream.end(), l.begin(), l.end());
    stream.push_back(eos_id);
  }
  return stream;
}

std::vector<data::IdLine> cut_blocks(const std::vector<int32_t>& stream, int64_t block_size, bool keep_tail) {
  QKV_CHECK(block_size >= 1, "--block-size must be positive, got " << block_size);
  std::vector<data::IdLine> blocks;
  const int64_t n = static_cast<int64_t>(stream.size());
  for (int64_t begin = 0; begin + 1 < n; begin += block_size) {
    const int64_t end = std::min(n, begin + block_size + 1);
    if (end - begin < block_size + 1 && !keep_tail) break;
    blocks.emplace_back(stream.begin() + begin, stream.begin() + end);
  }
  return blocks;
}

LanguageModelData::LanguageModelData(const std::vector<int32_t>& stream, int64_t block_size, int64_t batch_size,
                                     uint64_t seed)
    : blocks_(cut_blocks(stream, block_size, false)), block_size_(block_size), batch_size_(batch_size), seed_(seed) {
  QKV_CHECK(batch_size >= 1, "--batch-size must be positive, got " << batch_size);
  QKV_CHECK(!blocks_.empty(), "the training text has " << stream.size() << " tokens, fewer than one block of "
                                                       << block_size + 1 << " (lower --block-size)");
  shuffle_for_epoch();
}

void LanguageModelData::shuffle_for_epoch() {
  order_.resize(blocks_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch_));
  // Fisher-Yates with our own index draws: std::shuffle's sequence differs between libraries.
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
}

data::Batch LanguageModelData::next() {
  const int64_t first = index_ * batch_size_, B = std::min(batch_size_, blocks() - first);
  data::Batch b;
  b.tgt = Tensor::empty(Dims{B, block_size_ + 1}, DType::I32);
  for (int64_t r = 0; r < B; ++r)
    std::copy(blocks_[static_cast<size_t>(order_[static_cast<size_t>(first + r)])].begin(),
              blocks_[static_cast<size_t>(order_[static_cast<size_t>(first + r)])].end(),
              b.tgt.i32() + r * (block_size_ + 1));
  b.epoch = epoch_;
  b.index = index_;
  b.tgt_tokens = B * block_size_;
  if (++index_ == batches_per_epoch()) {  // as data::Batcher: epoch() is that of the next batch
    ++epoch_;
    index_ = 0;
    shuffle_for_epoch();
  }
  return b;
}

nlohmann::json LanguageModelData::state() const {
  return {{"epoch", epoch_}, {"index", index_}, {"seed", seed_}, {"blocks", blocks()}, {"block_size", block_size_},
          {"batch_size", batch_size_}};
}

void LanguageModelData::restore(const nlohmann::json& s, int64_t) {
  const int64_t blocks = s.at("blocks").get<int64_t>(), block_size = s.at("block_size").get<int64_t>();
  QKV_CHECK(blocks == this->blocks() && block_size == block_size_,
            "the saved run had " << blocks << " blocks of " << block_size << " tokens; this text gives "
                                 << this->blocks() << " of " << block_size_
                                 << " (a different text, vocabulary or --block-size cannot resume the run)");
  QKV_CHECK(s.at("batch_size").get<int64_t>() == batch_size_,
            "the saved run used --batch-size " << s.at("batch_size").get<int64_t>() << ", not " << batch_size_);
  seed_ = s.at("seed").get<uint64_t>();
  epoch_ = s.at("epoch").get<int64_t>();
  index_ = s.at("index").get<int64_t>();
  QKV_CHECK(epoch_ >= 0 && index_ >= 0 && index_ < batches_per_epoch(),
            "saved data position (epoch " << epoch_ << ", batch " << index_ << ") is outside the data");
  shuffle_for_epoch();
}

}  // namespace qkv::train
