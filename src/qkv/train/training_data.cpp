#include "qkv/train/training_data.h"

#include "qkv/core/error.h"
#include "qkv/data/synthetic.h"

namespace qkv::train {

SyntheticData::SyntheticData(std::string task, int64_t batch, int64_t len, int64_t vocab, uint64_t seed)
    : task_(std::move(task)), batch_(batch), len_(len), vocab_(vocab), seed_(seed) {
  QKV_CHECK(task_ == "random" || task_ == "copy", "unknown synthetic task '" << task_ << "' (expected random or copy)");
  QKV_CHECK(batch_ > 0 && len_ >= 2, "synthetic data: batch must be positive and len >= 2, got " << batch_ << " x " << len_);
}

data::Batch SyntheticData::next() {
  data::SyntheticBatch s = data::synthetic_batch(task_, batch_, len_, vocab_, seed_, position_++);
  data::Batch b;
  b.src = std::move(s.src);
  b.tgt = std::move(s.tgt);
  b.index = position_ - 1;
  return b;
}

nlohmann::json SyntheticData::state() const {
  return {{"task", task_}, {"batch", batch_}, {"len", len_}, {"seed", seed_}, {"position", position_}};
}

void SyntheticData::restore(const nlohmann::json& s, int64_t step) {
  task_ = s.at("task").get<std::string>();
  batch_ = s.at("batch").get<int64_t>();
  len_ = s.at("len").get<int64_t>();
  seed_ = s.at("seed").get<uint64_t>();
  position_ = s.contains("position") ? s.at("position").get<int64_t>() : step;
}

nlohmann::json ParallelData::state() const {
  const data::BatcherState s = batcher_.state();
  return {{"epoch", s.epoch}, {"index", s.index}, {"seed", s.seed}, {"length_order", data::length_order_name(s.length_order)}};
}

data::LengthOrder ParallelData::saved_length_order(const nlohmann::json& s) {
  return s.contains("length_order") ? data::parse_length_order(s.at("length_order").get<std::string>())
                                    : data::LengthOrder::SourceThenTarget;  // saved before the field existed
}

void ParallelData::restore(const nlohmann::json& s, int64_t) {
  batcher_.restore({s.at("epoch").get<int64_t>(), s.at("index").get<int64_t>(), s.at("seed").get<uint64_t>(),
                    saved_length_order(s)});
}

}  // namespace qkv::train
