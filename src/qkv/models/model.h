// What every model family shares, whatever callers do with it (in the spirit of CTranslate2's
// models/): the config it was built from, the generator its dropout draws from, the buffers a
// checkpoint stores beside the parameters, and the teacher-forced forward that training and
// scoring use. The families add what their callers need:
//   Transformer (encoder-decoder, sequence-to-sequence): encode, start decoding, step, reorder;
//   CausalLM (decoder-only, a generator): forward, prefill, step, reorder.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/models/config.h"
#include "qkv/nn/module.h"
#include "qkv/nn/compute_type.h"
#include "qkv/nn/layers.h"

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
  // Under a compute type (set_compute_type), a forward without gradients runs in it.
  virtual Var teacher_forced_logits(const Tensor& src, const Tensor& input) const = 0;

  // The compute type inference runs in (nn/compute_type.h), chosen once after loading: prepares
  // every linear layer that inference runs through (the family's inference_linears) in the type's
  // linear form and every embedding table in its table dtype, from the weights' values now. From
  // then on every forward without gradients (translate, generate, score, embed, classify) uses
  // them; a forward that records gradients uses the float32 weights as always. Changing the
  // weights afterwards (training, loading) needs set_compute_type again or clear_compute_type.
  void set_compute_type(nn::ComputeType type);
  // Drops the inference forms: every forward multiplies with the float32 weights (BLAS).
  void clear_compute_type();
  std::optional<nn::ComputeType> compute_type() const { return compute_type_; }
  // Bytes of the inference forms (packed, quantized, bf16 weights and tables), beside the weights.
  int64_t inference_bytes() const;
  // Moves the parameters and buffers to `device` (nn::Module::to) and prepares the compute type, if
  // one is set, again there. Inputs then go to the same device (Tensor::to).
  void to(Device device);
  // Tensors stored in model.safetensors beside the parameters (a sinusoidal table), by name.
  virtual std::vector<std::pair<std::string, Tensor>> named_buffers() const { return {}; }
  // Activation checkpointing of every feed-forward block (see PositionWiseFeedForward).
  virtual void set_recompute_ffn(bool on) = 0;
  // The size of the output distribution (tgt_vocab_size; vocab_size of a decoder-only model).
  int64_t output_vocab_size() const { return config_.tgt_vocab_size; }

 protected:
  // The linear layers a compute type prepares: those inference multiplies with many rows at a time
  // (an encoder-only model's task heads stay float32), and the embedding tables it looks up.
  virtual std::vector<nn::Linear*> inference_linears() = 0;
  virtual std::vector<nn::Embedding*> inference_embeddings() = 0;

  TransformerConfig config_;
  mutable Generator gen_;
  std::optional<nn::ComputeType> compute_type_;
};

// A compute type for the lifetime of the guard (training's validation translates with packed
// float32 weights between optimizer steps); the model's previous one, or none, afterwards.
class ScopedComputeType {
 public:
  ScopedComputeType(Model& model, nn::ComputeType type) : model_(model), previous_(model.compute_type()) {
    model.set_compute_type(type);
  }
  ~ScopedComputeType() {
    if (previous_)
      model_.set_compute_type(*previous_);
    else
      model_.clear_compute_type();
  }
  ScopedComputeType(const ScopedComputeType&) = delete;
  ScopedComputeType& operator=(const ScopedComputeType&) = delete;

 private:
  Model& model_;
  std::optional<nn::ComputeType> previous_;
};

}  // namespace qkv::models
