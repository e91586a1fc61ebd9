// What every model family shares, whatever callers do with it (in the spirit of CTranslate2's
// models/): the config it was built from, the generator its dropout draws from, the buffers a
// checkpoint stores beside the parameters, and the teacher-forced forward that training and
// scoring use. The families add what their callers need:
//   Transformer (encoder-decoder, sequence-to-sequence): encode, start decoding, step, reorder;
//   CausalLM (decoder-only, a generator): forward, prefill, step, reorder.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/models/config.h"
#include "qkv/nn/module.h"
#include "qkv/nn/packed_linears.h"

namespace qkv::models {

class Model : public nn::Module {
 public:
  // Validates the config (an impossible size is refused naming its field before anything is built).
  Model(const TransformerConfig& config, uint64_t seed);

  const TransformerConfig& config() const { return config_; }
  // Parameters are drawn from it at construction; dropout draws from it while training, and its
  // state is part of a training checkpoint.
  Generator& generator() const { return gen_; }

  // Teacher-forced logits (B, T, V) for training and scoring: the encoder-decoder model reads
  // `src` (B, S) and the target input (B, T); a decoder-only model ignores `src`.
  // packed: packs of the model's linears (pack_linears) to multiply with at inference (scoring in
  // int8), or null for the weights themselves.
  Var teacher_forced_logits(const Tensor& src, const Tensor& input) const {
    return teacher_forced_logits(src, input, nullptr);
  }
  virtual Var teacher_forced_logits(const Tensor& src, const Tensor& input, const nn::PackedLinears* packed) const = 0;
  // The linear layers that teacher_forced_logits runs through, packed in `precision`: copies of
  // the weights now, for inference only (nn/packed_linears.h).
  virtual std::shared_ptr<const nn::PackedLinears> pack_linears(nn::LinearPrecision precision) const = 0;
  // Tensors stored in model.safetensors beside the parameters (a sinusoidal table), by name.
  virtual std::vector<std::pair<std::string, Tensor>> named_buffers() const { return {}; }
  // Activation checkpointing of every feed-forward block (see PositionWiseFeedForward).
  virtual void set_recompute_ffn(bool on) = 0;
  // The size of the output distribution (tgt_vocab_size; vocab_size of a decoder-only model).
  int64_t output_vocab_size() const { return config_.tgt_vocab_size; }

 protected:
  TransformerConfig config_;
  mutable Generator gen_;
};

}  // namespace qkv::models
