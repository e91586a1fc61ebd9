// Checkpoint directories:
//   config.json        TransformerConfig (its "architecture" says which family)
//   model.safetensors  weights under the model's state_dict() keys (including buffers such as the
//                      positional_encoding.pe table, so torch's load_state_dict works strictly)
//   optimizer.safetensors, train_state.json   written by training, for exact resume
//   source.spm.model, target.spm.model          SentencePiece models of a translation model
//   spm.model                                   SentencePiece model of a language model
//   tokenizer.json                              Hugging Face tokenizer of an imported model
//   source.spm, target.spm, vocab.json, [target_vocab.json], tokenizer_config.json
//                                               an imported Marian model's (text/marian_tokenizer.h)
//   manifest.json      step, size and CRC-32 of every other file (io/checkpoint_dir.h)
// A checkpoint is written whole into a staging directory and swapped into place, so it is always
// either the complete old set or the complete new one; loading verifies the manifest.
#pragma once
#include <memory>
#include <string>

#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/encoder_model.h"
#include "qkv/models/transformer.h"

namespace qkv::models {

// File names of the SentencePiece models inside a checkpoint directory (qkv translate reads them).
inline constexpr const char* kSourceSpmFile = "source.spm.model";
inline constexpr const char* kTargetSpmFile = "target.spm.model";
inline constexpr const char* kLmSpmFile = "spm.model";
inline constexpr const char* kLmBpeFile = "tokenizer.json";  // GPT-2's byte-level BPE (imported models)

// config.json + model.safetensors of `model` into a staged checkpoint. Refuses (naming the tensor)
// weights that are NaN or infinite: a diverged model must never replace a good checkpoint.
void write_model_files(io::StagedDirectory& dir, const Model& model, int64_t step = -1);
// A checkpoint of the model alone (config + weights), written all-or-nothing.
void save_model(const std::string& dir, const Model& model);
// Builds the model config.json describes (any family) and loads dir/model.safetensors strictly: a
// missing, extra or mis-shaped tensor is an error naming it, as is a NaN/Inf weight, a manifest that
// does not match the files, or tied weights stored as two different matrices.
std::unique_ptr<Model> load_model(const std::string& dir, uint64_t seed = 0);
// The same for callers that need one family: a checkpoint of another family is refused with a
// message naming both architectures.
std::unique_ptr<Transformer> load_seq2seq(const std::string& dir, uint64_t seed = 0);
std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, uint64_t seed = 0);
// `use` words the message: "embedding needs an encoder-only model".
std::unique_ptr<EncoderModel> load_encoder(const std::string& dir, const char* use = "this command", uint64_t seed = 0);
// Builds the model of `config` (its family) with weights initialised from `seed`.
std::unique_ptr<Model> make_model(const TransformerConfig& config, uint64_t seed);
// Loads weights into an existing model (same strictness).
void load_weights(const std::string& path, Model& model);
// Name of the first parameter holding a NaN or infinity, or "" when all are finite.
std::string first_non_finite_parameter(const Model& model);
// The tokenizer of a language-model checkpoint: spm.model (trained by qkv) or tokenizer.json
// (imported); "" when it has neither (ids only).
std::string lm_tokenizer_path(const std::string& dir);
// Throws unless `dir` is an existing directory (a clear message for a file or a missing path).
void check_checkpoint_dir(const std::string& dir);

}  // namespace qkv::models
