// What callers of an encoder-only checkpoint do (`qkv embed`, `qkv similar`, `qkv classify`, the
// Python module's Encoder): the model with its tokenizer and pooling, texts turned into
// [CLS] ... [SEP] ids, sentence embeddings and class probabilities.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/data/encoder_text.h"
#include "qkv/models/sentence_embedding.h"
#include "qkv/text/tokenizer.h"

namespace qkv::api {

class Encoder {
 public:
  // Loads DIR (an encoder-only checkpoint; another family is refused naming `use`, e.g.
  // "embedding") in eval mode, its tokenizer when it has one, and its pooling
  // (sentence_embedding.json; max_seq_length resolved to the model's when absent).
  // compute_type: how inference computes (nn/compute_type.h), set once here for every call.
  // device: where the model runs (a GPU: core/cuda_runtime.h); results come back to the host.
  explicit Encoder(const std::string& checkpoint_dir, const char* use = "this command",
                   nn::ComputeType compute_type = nn::ComputeType::Float32, Device device = Device::cpu());
  ~Encoder();

  const models::EncoderModel& model() const { return *model_; }
  models::EncoderModel& model() { return *model_; }
  nn::ComputeType compute_type() const { return *model_->compute_type(); }
  Device device() const { return model_->device(); }
  void set_compute_type(nn::ComputeType type) { model_->set_compute_type(type); }
  const text::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const models::SentenceEmbeddingConfig& pooling() const { return pooling_; }
  // Tokens per sentence at most ([CLS] and [SEP] included), within the model's positions.
  void set_max_tokens(int64_t max_tokens);
  // Over max_tokens: cut (Truncate) or an error naming `where` (Error).
  void set_too_long(data::TooLong too_long) { too_long_ = too_long; }

  // [CLS] text [SEP] ids (needs a tokenizer), or the same around given ids; `where` names the
  // sentence in errors.
  std::vector<int32_t> encode(const std::string& text, const std::string& where) const;
  std::vector<int32_t> encode_ids(const std::vector<int32_t>& ids, const std::string& where) const;
  std::vector<std::vector<int32_t>> encode_all(const std::vector<std::string>& texts) const;  // "line N"

  // (N, d_model) sentence embeddings of tokenised sentences, in batches of similar lengths;
  // on_batch (optional) hears the sentences done so far. The products run in the compute type, from
  // the weights as they were when it was set: after changing weights through model(), call
  // set_compute_type again.
  Tensor embed_ids(const std::vector<std::vector<int32_t>>& sentences, int64_t batch_size = 32,
                   const std::function<void(int64_t done)>& on_batch = {}) const;
  Tensor embed(const std::vector<std::string>& texts, int64_t batch_size = 32) const;
  // (N, labels) class probabilities (needs a classification head: config.json "labels").
  Tensor classify_ids(const std::vector<std::vector<int32_t>>& sentences, int64_t batch_size = 32) const;
  Tensor classify(const std::vector<std::string>& texts, int64_t batch_size = 32) const;
  const std::vector<std::string>& labels() const;

 private:
  std::unique_ptr<models::EncoderModel> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  models::SentenceEmbeddingConfig pooling_;
  data::TooLong too_long_ = data::TooLong::Truncate;
  std::string dir_;
};

}  // namespace qkv::api
