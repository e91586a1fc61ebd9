#include "qkv/train/encoder_data.h"

#include <algorithm>
#include <random>
#include <set>

#include "qkv/core/error.h"
#include "qkv/text/utf8.h"

namespace qkv::train {

std::vector<data::IdLine> mlm_blocks(const std::vector<data::IdLine>& lines, int64_t block_size, int32_t cls_id,
                                     int32_t sep_id, bool keep_tail) {
  QKV_CHECK(block_size >= 3, "--block-size must be at least 3 ([CLS], a token, [SEP]), got " << block_size);
  std::vector<int32_t> stream;
  for (const data::IdLine& l : lines) {
    stream.insert(stream.end(), l.begin(), l.end());
    stream.push_back(sep_id);
  }
  const size_t chunk = static_cast<size_t>(block_size - 2);
  std::vector<data::IdLine> blocks;
  for (size_t begin = 0; begin < stream.size(); begin += chunk) {
    const size_t end = std::min(stream.size(), begin + chunk);
    if (end - begin < chunk && !keep_tail) break;
    data::IdLine b;
    b.reserve(end - begin + 2);
    b.push_back(cls_id);
    b.insert(b.end(), stream.begin() + static_cast<std::ptrdiff_t>(begin), stream.begin() + static_cast<std::ptrdiff_t>(end));
    b.push_back(sep_id);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

Tensor pad_rows(const std::vector<const data::IdLine*>& rows, int32_t pad) {
  size_t T = 1;
  for (const data::IdLine* r : rows) T = std::max(T, r->size());
  const int64_t B = static_cast<int64_t>(rows.size());
  Tensor t = Tensor::empty(Dims{B, static_cast<int64_t>(T)}, DType::I32);
  for (int64_t b = 0; b < B; ++b) {
    int32_t* row = t.i32() + b * static_cast<int64_t>(T);
    std::fill(row, row + T, pad);
    std::copy(rows[static_cast<size_t>(b)]->begin(), rows[static_cast<size_t>(b)]->end(), row);
  }
  return t;
}

EpochPlan::EpochPlan(int64_t items, int64_t batch_size, uint64_t seed)
    : items_(items), batch_size_(batch_size), seed_(seed) {
  QKV_CHECK(batch_size >= 1, "--batch-size must be positive, got " << batch_size);
  shuffle();
}

void EpochPlan::shuffle() {
  order_.resize(static_cast<size_t>(items_));
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch_));
  // Fisher-Yates with our own index draws: std::shuffle's sequence differs between libraries.
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
}

std::vector<int64_t> EpochPlan::next() {
  const int64_t first = index_ * batch_size_, n = std::min(batch_size_, items_ - first);
  std::vector<int64_t> items(order_.begin() + first, order_.begin() + first + n);
  if (++index_ == batches_per_epoch()) {  // as data::Batcher: epoch() is that of the next batch
    ++epoch_;
    index_ = 0;
    shuffle();
  }
  return items;
}

nlohmann::json EpochPlan::state() const {
  return {{"epoch", epoch_}, {"index", index_}, {"seed", seed_}, {"items", items_}, {"batch_size", batch_size_}};
}

void EpochPlan::restore(const nlohmann::json& s, const char* what) {
  const int64_t items = s.at("items").get<int64_t>(), batch = s.at("batch_size").get<int64_t>();
  QKV_CHECK(items == items_, "the saved run had " << items << " " << what << "; this data gives " << items_
                                                  << " (a different text, vocabulary or --block-size cannot resume the run)");
  QKV_CHECK(batch == batch_size_, "the saved run used --batch-size " << batch << ", not " << batch_size_);
  seed_ = s.at("seed").get<uint64_t>();
  epoch_ = s.at("epoch").get<int64_t>();
  index_ = s.at("index").get<int64_t>();
  QKV_CHECK(epoch_ >= 0 && index_ >= 0 && index_ < batches_per_epoch(),
            "saved data position (epoch " << epoch_ << ", batch " << index_ << ") is outside the data");
  shuffle();
}

MaskedLmData::MaskedLmData(std::vector<data::IdLine> blocks, Masker masker, int64_t batch_size, uint64_t seed)
    : blocks_(std::move(blocks)),
      masker_(std::move(masker)),
      seed_(seed),
      plan_(static_cast<int64_t>(blocks_.size()), batch_size, seed) {
  QKV_CHECK(!blocks_.empty(), "the training text gives no block (too short a text, or lower --block-size)");
}

data::Batch MaskedLmData::next() {
  data::Batch b;
  b.epoch = plan_.epoch();
  b.index = plan_.index();
  std::vector<MaskedSequence> masked;
  for (const int64_t block : plan_.next())
    masked.push_back(masker_.mask(blocks_[static_cast<size_t>(block)], seed_, static_cast<uint64_t>(b.epoch),
                                  static_cast<uint64_t>(block)));
  std::vector<const data::IdLine*> ids, labels;
  for (const MaskedSequence& m : masked) {
    ids.push_back(&m.ids);
    labels.push_back(&m.labels);
  }
  b.tgt = pad_rows(ids, 0);  // blocks have one length: nothing is padded
  b.labels = pad_rows(labels, -1);
  for (const MaskedSequence& m : masked)
    for (const int32_t l : m.labels) b.tgt_tokens += l != -1;
  return b;
}

nlohmann::json MaskedLmData::state() const { return plan_.state(); }
void MaskedLmData::restore(const nlohmann::json& s, int64_t) { plan_.restore(s, "blocks"); }

std::vector<LabelledLine> read_labelled(const std::string& path) {
  std::vector<LabelledLine> out;
  const std::vector<std::string> lines = text::read_text_lines(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.find_first_not_of(" \t\r\f\v") == std::string::npos) continue;  // blank
    const size_t tab = l.find('\t');
    QKV_CHECK(tab != std::string::npos, path << ":" << i + 1 << ": no TAB: a labelled line is label<TAB>text");
    QKV_CHECK(tab > 0, path << ":" << i + 1 << ": empty label before the TAB");
    out.push_back({l.substr(0, tab), l.substr(tab + 1), static_cast<int64_t>(i + 1)});
  }
  QKV_CHECK(!out.empty(), path << ": no labelled lines");
  return out;
}

std::vector<std::string> collect_labels(const std::vector<LabelledLine>& lines) {
  std::set<std::string> labels;
  for (const LabelledLine& l : lines) labels.insert(l.label);
  return {labels.begin(), labels.end()};
}

std::vector<int32_t> label_indices(const std::vector<LabelledLine>& lines, const std::vector<std::string>& labels,
                                   const std::string& path) {
  std::vector<int32_t> out;
  out.reserve(lines.size());
  for (const LabelledLine& l : lines) {
    const auto it = std::lower_bound(labels.begin(), labels.end(), l.label);
    QKV_CHECK(it != labels.end() && *it == l.label,
              path << ":" << l.line << ": label '" << l.label << "' is not one of the model's " << labels.size()
                   << " labels (those of the training file)");
    out.push_back(static_cast<int32_t>(it - labels.begin()));
  }
  return out;
}

ClassificationData::ClassificationData(std::vector<data::IdLine> rows, std::vector<int32_t> labels, int32_t pad_id,
                                       int64_t batch_size, uint64_t seed)
    : rows_(std::move(rows)),
      labels_(std::move(labels)),
      pad_id_(pad_id),
      plan_(static_cast<int64_t>(rows_.size()), batch_size, seed) {
  QKV_CHECK(!rows_.empty() && rows_.size() == labels_.size(),
            "classification data: " << rows_.size() << " rows and " << labels_.size() << " labels");
}

data::Batch ClassificationData::next() {
  data::Batch b;
  b.epoch = plan_.epoch();
  b.index = plan_.index();
  std::vector<const data::IdLine*> rows;
  std::vector<int32_t> labels;
  for (const int64_t i : plan_.next()) {
    rows.push_back(&rows_[static_cast<size_t>(i)]);
    labels.push_back(labels_[static_cast<size_t>(i)]);
  }
  b.tgt = pad_rows(rows, pad_id_);
  b.labels = Tensor::from_ids(Dims{static_cast<int64_t>(labels.size())}, labels);
  b.tgt_tokens = static_cast<int64_t>(labels.size());
  return b;
}

nlohmann::json ClassificationData::state() const { return plan_.state(); }
void ClassificationData::restore(const nlohmann::json& s, int64_t) { plan_.restore(s, "sentences"); }

}  // namespace qkv::train
