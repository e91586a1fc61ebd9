// Basic layers, each as its torch.nn namesake: Linear, Embedding, LayerNorm, Dropout, and the
// seed's PositionalEncoding. Initialisation follows PyTorch's defaults (values differ: our RNG).
#pragma once
#include "qkv/autograd/functions.h"
#include "qkv/nn/compute_type.h"
#include "qkv/nn/module.h"

namespace qkv::nn {

// While one of these lives on a thread, the random initialisation of parameters constructed there
// (Linear, Embedding, the models' own init_*_weights) leaves their values unset: for a model whose
// every parameter is loaded right after (models::load_model, a strict load). Each generator still
// advances exactly as if the values had been drawn, so everything drawn later is the same.
class SkipRandomInitGuard {
 public:
  SkipRandomInitGuard();
  ~SkipRandomInitGuard();
  SkipRandomInitGuard(const SkipRandomInitGuard&) = delete;
  SkipRandomInitGuard& operator=(const SkipRandomInitGuard&) = delete;

 private:
  bool previous_;
};
bool random_init_skipped();

// y = x @ W^T + b.   W (out, in), b (out).   Init U(-1/sqrt(in), 1/sqrt(in)) as nn.Linear.
//
// For inference the layer can hold its weight in another form (set_compute_type: packed float32,
// int8 with scales, bf16; ops::LinearWeight), made once from the weight's values at that moment.
// forward multiplies with that form whenever no gradient is being recorded, and with the weight
// itself otherwise, so training never sees it. Whoever changes the weight afterwards (an optimizer
// step, a load) sets the compute type again or clears it (models::Model does both).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  // use: fn::InputUse::LastUse when nothing else keeps x (see fn::InputUse).
  Var forward(const Var& x, fn::InputUse use = fn::InputUse::Shared) const;
  // Shares `w` as this layer's weight (tied embeddings); the old weight is dropped, and any
  // inference form of it.
  void tie_weight(const Var& w);
  // Prepares the inference form of the weight in the compute type's linear dtype (a copy).
  void set_compute_type(ComputeType type);
  void clear_inference_weight() { inference_ = {}; }
  const ops::LinearWeight& inference_weight() const { return inference_; }
  // Whether forward(x) multiplies with the inference weight (one is prepared and no gradient is
  // being recorded).
  bool uses_inference_weight(const Var& x) const;
  Var weight, bias;

 private:
  ops::LinearWeight inference_;
};

// Lookup rows of W (num_embeddings, dim).   Init N(0, 1) as nn.Embedding.
// For inference the table can be held in the compute type's table dtype (bf16), as Linear's weight
// (set_compute_type; used when no gradient is being recorded).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen);
  Var forward(const Tensor& ids) const;
  void tie_weight(const Var& w);  // share another table of the same shape (drops an inference table)
  // A bf16 copy of the table for the bf16 compute types; none (the table itself) for the others.
  void set_compute_type(ComputeType type);
  void clear_inference_table() { inference_table_ = Tensor(); }
  const Tensor& inference_table() const { return inference_table_; }
  Var weight;
  int32_t padding_idx = -1;  // >= 0: lookups of this id pass no gradient (nn.Embedding's padding_idx)

 private:
  Tensor inference_table_;
};

// nn.LayerNorm (weight 1, bias 0), or with UnbiasedStd seed 003's LayerNorm, whose a_2 / b_2 are
// stored under the same names weight / bias. With RMS, T5's T5LayerNorm: only `weight` is
// registered (as in T5's state_dict) and `bias` stays an undefined Var.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f, ops::LayerNormVariant variant = ops::LayerNormVariant::Standard);
  Var forward(const Var& x) const { return fn::layernorm(x, weight, bias, eps_, variant_); }
  // forward(x + y), in one fused op when no gradient is being taken (fn::add_layernorm).
  Var forward_sum(const Var& x, const Var& y) const { return fn::add_layernorm(x, y, weight, bias, eps_, variant_); }
  Var weight, bias;

 private:
  float eps_;
  ops::LayerNormVariant variant_;
};

// Inverted dropout, active only in training mode; draws masks from the model's Generator.
class Dropout : public Module {
 public:
  // The counters of one mask, reserved from the Generator; inactive means identity (eval mode, p = 0).
  struct Mask {
    bool active = false;
    uint64_t seed = 0, offset = 0;
  };
  Dropout(float p, Generator& gen) : p_(p), gen_(&gen) {}
  Var forward(const Var& x) const { return apply(x, draw(x.value().numel(), x.size(0))); }
  // Drawing and applying apart: a block replayed in backward (activation checkpointing) draws its
  // mask once in forward and applies that same mask in both passes.
  // `rows`: the size of the masked tensor's dimension 0, its batch rows (Generator::reserve_rows).
  Mask draw(int64_t numel, int64_t rows) const;
  Var apply(const Var& x, const Mask& mask) const;
  float p() const { return p_; }

 private:
  float p_;
  Generator* gen_;
};

// x + pe[:T] with the seed's sinusoidal table (max_seq_length, d_model); a buffer, not a parameter.
class PositionalEncoding : public Module {
 public:
  // halves: Marian's layout (ops::sinusoidal_table_halves) instead of the seed's interleaved one.
  PositionalEncoding(int64_t d_model, int64_t max_seq_length, bool halves = false);
  // Another table (max_seq_length, d_model), such as M2M100's (ops::sinusoidal_table_fairseq).
  explicit PositionalEncoding(Tensor table) : pe(std::move(table)) {}
  Var forward(const Var& x) const { return fn::add_positional(x, pe); }
  Tensor pe;

 protected:
  void move_buffers(Device device) override { pe.move_storage_to(device); }
};

}  // namespace qkv::nn
