// Sentence embeddings from an encoder-only model, as sentence-transformers computes them: the
// hidden states of a sentence's tokens pooled into one vector (the mean over its real tokens, the
// [CLS] token's state, or the maximum), then optionally scaled to unit length. A checkpoint says
// how in sentence_embedding.json (written by `qkv import` from sentence-transformers' modules.json,
// 1_Pooling/config.json and sentence_bert_config.json); without that file, mean pooling with
// normalisation over the model's whole position table.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/models/encoder_model.h"

namespace qkv::models {

inline constexpr const char* kSentenceEmbeddingFile = "sentence_embedding.json";

struct SentenceEmbeddingConfig {
  std::string pooling = "mean";  // "mean", "cls", "max" or "mean_sqrt_len"
  bool normalize = true;         // divide by the L2 norm (sentence-transformers' Normalize module)
  int64_t max_seq_length = 0;    // tokens kept per sentence, [CLS] and [SEP] included (0: the model's)
};

std::string sentence_embedding_to_json(const SentenceEmbeddingConfig& c);
// Errors name the file and the field.
SentenceEmbeddingConfig sentence_embedding_from_json(const std::string& text, const std::string& source);
// DIR/sentence_embedding.json, or the defaults when the checkpoint has none.
SentenceEmbeddingConfig load_sentence_embedding_config(const std::string& checkpoint_dir);
std::string describe(const SentenceEmbeddingConfig& c);  // "mean pooling, normalised, 256 tokens"

// Embeddings (N, D) of N tokenised sentences (each [CLS] ... [SEP], at most the model's
// max_seq_length and non-empty), run as one right-padded batch without recording. The model must be
// in eval mode (no dropout); it runs in the model's compute type (Model::set_compute_type).
Tensor sentence_embeddings(const EncoderModel& model, const std::vector<std::vector<int32_t>>& sentences,
                           const SentenceEmbeddingConfig& config);
// The same for any number of sentences, in batches of `batch_size` sentences of similar lengths
// (sorted by length, as sentence-transformers does, so little is spent on padding); rows in input
// order. `on_batch` (optional) hears the sentences done so far.
Tensor embed_sentences(const EncoderModel& model, const std::vector<std::vector<int32_t>>& sentences,
                       const SentenceEmbeddingConfig& config, int64_t batch_size,
                       const std::function<void(int64_t done)>& on_batch = {});

}  // namespace qkv::models
