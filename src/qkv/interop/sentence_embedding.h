// sentence-transformers' description of a model directory: modules.json lists the modules
// (Transformer, Pooling, Normalize), 1_Pooling/config.json the pooling mode, and
// sentence_bert_config.json the max_seq_length it truncates at.
#pragma once
#include <optional>
#include <string>

#include "qkv/models/sentence_embedding.h"

namespace qkv::interop {

using models::describe;
using models::kSentenceEmbeddingFile;
using models::SentenceEmbeddingConfig;
using models::sentence_embedding_to_json;

// The pooling of a sentence-transformers directory, or nullopt when it has no modules.json. Modules
// other than Transformer, Pooling and Normalize (Dense, ...) are refused by name, as are pooling
// modes qkv does not compute (weightedmean, lasttoken) and several modes at once.
std::optional<SentenceEmbeddingConfig> read_sentence_transformers_config(const std::string& hf_dir);

}  // namespace qkv::interop
