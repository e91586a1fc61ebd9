// Checkpoint directories:
//   config.json        TransformerConfig
//   model.safetensors  weights under the seed model's state_dict() keys (including the
//                      positional_encoding.pe buffer, so torch's load_state_dict works strictly)
//   optimizer.safetensors, train_state.json   written by training, for exact resume
//   source.spm.model, target.spm.model          SentencePiece models of a text model (corpus training)
// Every file is written atomically (temporary + rename).
#pragma once
#include <memory>
#include <string>

#include "qkv/models/transformer.h"

namespace qkv::models {

// File names of the SentencePiece models inside a checkpoint directory (qkv translate reads them).
inline constexpr const char* kSourceSpmFile = "source.spm.model";
inline constexpr const char* kTargetSpmFile = "target.spm.model";

void save_model(const std::string& dir, const Transformer& model);
// Builds the model from dir/config.json and loads dir/model.safetensors strictly: a missing, extra
// or mis-shaped tensor is an error naming it.
std::unique_ptr<Transformer> load_model(const std::string& dir, uint64_t seed = 0);
// Loads weights into an existing model (same strictness).
void load_weights(const std::string& path, Transformer& model);

}  // namespace qkv::models
