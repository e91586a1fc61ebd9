#include "qkv/api/encoder.h"

#include "qkv/models/checkpoint.h"
#include "qkv/train/encoder_eval.h"

namespace qkv::api {

Encoder::Encoder(const std::string& checkpoint_dir, const char* use, nn::ComputeType compute_type,
                 Device device)
    : dir_(checkpoint_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  model_ = models::load_encoder(checkpoint_dir, use);
  model_->eval();
  model_->to(device);
  model_->set_compute_type(compute_type);
  const models::TransformerConfig& c = model_->config();
  pooling_ = models::load_sentence_embedding_config(checkpoint_dir);
  if (pooling_.max_seq_length <= 0 || pooling_.max_seq_length > c.max_seq_length) pooling_.max_seq_length = c.max_seq_length;
  const std::string path = models::lm_tokenizer_path(checkpoint_dir);
  if (path.empty()) return;
  tokenizer_ = text::load_tokenizer(path);
  QKV_CHECK(tokenizer_->vocab_size() == c.tgt_vocab_size,
            path << ": the tokenizer has " << tokenizer_->vocab_size() << " tokens but the model's embedding has "
                 << c.tgt_vocab_size << " rows (config.json vocab_size)");
}

Encoder::~Encoder() = default;

void Encoder::set_max_tokens(int64_t max_tokens) {
  const int64_t positions = model_->config().max_seq_length;
  QKV_CHECK(max_tokens >= 2 && max_tokens <= positions,
            "max_tokens " << max_tokens << ": must be in [2, " << positions << "] (the model has " << positions
                          << " positions; [CLS] and [SEP] take two)");
  pooling_.max_seq_length = max_tokens;
}

std::vector<int32_t> Encoder::encode(const std::string& text, const std::string& where) const {
  QKV_CHECK(tokenizer_, dir_ << ": no tokenizer (tokenizer.json or spm.model); give token ids instead");
  return data::encoder_ids(*tokenizer_, model_->config(), text, pooling_.max_seq_length, too_long_, where);
}

std::vector<int32_t> Encoder::encode_ids(const std::vector<int32_t>& ids, const std::string& where) const {
  const int64_t V = model_->config().tgt_vocab_size;
  for (const int32_t id : ids) QKV_CHECK(id >= 0 && id < V, where << ": token id " << id << " is outside [0, " << V << ")");
  return data::encoder_ids_from_ids(ids, model_->config(), pooling_.max_seq_length, too_long_, where);
}

std::vector<std::vector<int32_t>> Encoder::encode_all(const std::vector<std::string>& texts) const {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) ids.push_back(encode(texts[i], "line " + std::to_string(i + 1)));
  return ids;
}

Tensor Encoder::embed_ids(const std::vector<std::vector<int32_t>>& sentences, int64_t batch_size,
                         const std::function<void(int64_t done)>& on_batch) const {
  QKV_CHECK(batch_size >= 1, "batch_size must be at least 1, got " << batch_size);
  return models::embed_sentences(*model_, sentences, pooling_, batch_size, on_batch);
}

Tensor Encoder::embed(const std::vector<std::string>& texts, int64_t batch_size) const {
  return embed_ids(encode_all(texts), batch_size);
}

const std::vector<std::string>& Encoder::labels() const { return model_->config().labels; }

Tensor Encoder::classify_ids(const std::vector<std::vector<int32_t>>& sentences, int64_t batch_size) const {
  QKV_CHECK(!labels().empty(), dir_ << ": the model has no classification head (config.json \"labels\" is empty); "
                                       "train one with qkv train --objective classify");
  QKV_CHECK(batch_size >= 1, "batch_size must be at least 1, got " << batch_size);
  if (sentences.empty()) return Tensor::zeros({0, static_cast<int64_t>(labels().size())});
  return train::class_probabilities(*model_, sentences, batch_size, {});
}

Tensor Encoder::classify(const std::vector<std::string>& texts, int64_t batch_size) const {
  return classify_ids(encode_all(texts), batch_size);
}

}  // namespace qkv::api
