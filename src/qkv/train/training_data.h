// Where a Trainer's batches come from. A source has a position that train_state.json saves
// (state()) and a resumed run restores, so the resumed run sees exactly the batches an
// uninterrupted one would.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "qkv/data/batcher.h"
#include "qkv/train/objective.h"

namespace qkv::train {

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  // "synthetic" or "translation": recorded in train_state.json; resume refuses a different kind.
  virtual std::string kind() const = 0;
  // The next batch (src, tgt with BOS/EOS, epoch, tgt_tokens).
  virtual data::Batch next() = 0;
  // Epoch (from 0) of the batch next() returns.
  virtual int64_t epoch() const = 0;
  virtual nlohmann::json state() const = 0;
  // Continues from a saved state; `step` is the saved training step (for sources keyed by step).
  // Throws qkv::Error when the state does not fit this data (different data or options).
  virtual void restore(const nlohmann::json& state, int64_t step) = 0;
  // What the batches mean, so that the one training step computes their loss: teacher-forced
  // next-token prediction unless the source says otherwise (masked LM, classification).
  virtual const Objective& objective() const { return teacher_forcing(); }
};

// Synthetic ids (data/synthetic.h): seed 000's fixed random batch, or the copy task. The batch of
// position p is a pure function of (task, batch, len, vocab, seed, p).
class SyntheticData final : public TrainingData {
 public:
  SyntheticData(std::string task, int64_t batch, int64_t len, int64_t vocab, uint64_t seed);
  std::string kind() const override { return "synthetic"; }
  data::Batch next() override;
  int64_t epoch() const override { return 0; }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state, int64_t step) override;

  const std::string& task() const { return task_; }
  int64_t batch() const { return batch_; }
  int64_t len() const { return len_; }

 private:
  std::string task_;
  int64_t batch_, len_, vocab_;
  uint64_t seed_;
  int64_t position_ = 0;
};

// Tokenized parallel text in token-count batches (data::Batcher).
class ParallelData final : public TrainingData {
 public:
  explicit ParallelData(data::Batcher batcher) : batcher_(std::move(batcher)) {}
  std::string kind() const override { return "translation"; }
  data::Batch next() override { return batcher_.next(); }
  int64_t epoch() const override { return batcher_.epoch(); }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state, int64_t step) override;
  const data::Batcher& batcher() const { return batcher_; }
  // The length order a saved state's plans were sorted by (source-then-target before it was saved).
  static data::LengthOrder saved_length_order(const nlohmann::json& state);

 private:
  data::Batcher batcher_;
};

}  // namespace qkv::train
