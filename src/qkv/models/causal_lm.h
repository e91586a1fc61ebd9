// The decoder-only family (GPT-2's blocks), a causal language model:
//   x = drop(wte(ids) + wpe(positions))           learned (GPT-2) or sinusoidal positions
//   block: x = x + drop(attn(ln_1(x)))             pre-LN, masked (causal) self-attention
//          x = x + drop(mlp(ln_2(x)))              GELU (erf) or GPT-2's tanh approximation
//   logits = lm_head(ln_f(x))                      lm_head tied to wte by default, no bias
// Parameter names (model.safetensors):
//   token_embedding.weight (V, D), position_embedding.weight (max_seq_length, D) [learned],
//   positional_encoding.pe (1, max_seq_length, D) [sinusoidal, a buffer],
//   layers.N.{norm1, self_attn.{W_q, W_k, W_v, W_o}, norm2, feed_forward.{fc1, fc2}}.{weight, bias},
//   final_norm.{weight, bias}, lm_head.weight (V, D) (the same matrix as the token embedding when tied).
// Initialisation as GPT-2 (and nanoGPT): weights and embeddings N(0, 0.02), the projections into the
// residual stream (W_o, fc2) N(0, 0.02 / sqrt(2 * num_layers)), biases 0, norms 1 / 0. PyTorch's
// module defaults (N(0, 1) embeddings) would start a tied model with a loss of several times log V.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/feed_forward.h"

namespace qkv::models {

class CausalBlock : public nn::Module {
 public:
  CausalBlock(const TransformerConfig& c, Generator& gen);
  // x (B, T, D); masks: causal plus, for left-padded batches, the padding keys. weights, when
  // given, receives the self-attention weights (B, H, T, keys).
  Var forward(const Var& x, const ops::AttentionMasks& masks, Tensor* weights = nullptr) const;
  // The same with the keys and values of the new positions appended to `cache` (inference).
  Var forward_cached(const Var& x, nn::KVCache& cache, const ops::AttentionMasks& masks, Tensor* weights = nullptr) const;
  nn::LayerNorm& norm1;
  nn::MultiHeadAttention& self_attn;
  nn::LayerNorm& norm2;
  nn::PositionWiseFeedForward& feed_forward;
  nn::Dropout& dropout;
};

// Incremental generation state of N sequences. Prompts are left-padded to a common length so that
// every row appends its next token at the same cache position; padding keys are masked and each
// row's positions count from its first real token.
struct GenerationState {
  std::vector<nn::KVCache> layers;
  Tensor key_keep;               // i32 (N, capacity): 0 on the left padding
  std::vector<int64_t> padding;  // per row: left-padding length
  int64_t length = 0;            // cache positions used (padding included)
  int64_t capacity = 0;          // padded prompt length + new tokens, <= max_seq_length
  // A state made by CausalLM::join with room for more rows: per layer, the whole key and value
  // storage, whose first rows() rows the caches are views of. CausalLM::append fills the others.
  std::vector<nn::KVCache> reserved;
  int64_t rows() const { return static_cast<int64_t>(padding.size()); }
};

class CausalLM : public Model {
 public:
  CausalLM(const TransformerConfig& config, uint64_t seed);

  // ids (B, T) i32 -> logits (B, T, V); position t of every row is t.
  // The methods below that take `weights` fill it on request (null: nothing kept, nothing spent)
  // with the self-attention weights of the call, one tensor per layer, (N, H, new positions,
  // cache positions so far): forward (B, H, T, T), prefill (N, H, P, P) over the left-padded
  // prompts (padding keys get 0), step (N, H, 1, length + 1).
  Var forward(const Tensor& ids, std::vector<Tensor>* weights = nullptr) const;
  Var teacher_forced_logits(const Tensor& src, const Tensor& input) const override;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const override;
  void set_recompute_ffn(bool on) override;

  // Inference (under NoGradGuard). prefill runs the (non-empty) prompts at once, filling the cache,
  // and returns the logits (N, V) of the token after each prompt; `max_new_tokens` sizes the cache
  // (longest prompt + max_new_tokens must fit max_seq_length).
  // The prompt and the steps run in the model's compute type (Model::set_compute_type; float32
  // weights through BLAS without one). kv_storage: key/value storage kept across the batches of a
  // caller that generates many (nn::KVCacheStorage; null: the state allocates its own).
  Var prefill(const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens, GenerationState& state,
              std::vector<Tensor>* weights = nullptr, nn::KVCacheStorage* kv_storage = nullptr) const;
  // tokens (N) i32 appended to every row -> logits (N, V) of the next token.
  Var step(const Tensor& tokens, GenerationState& state, std::vector<Tensor>* weights = nullptr) const;
  // Row i of the new state is row rows[i] of the old one (drop finished rows, beam reordering).
  void reorder(GenerationState& state, const std::vector<int64_t>& rows) const;
  // Continuous batching (decoding/continuous_generation.h) keeps one state whose rows come and go:
  //
  // join: the rows of `first` followed by the rows of `second` (a running batch and prompts just
  // read) in a new state. Every row keeps its tokens, keys and positions; only its left padding
  // changes, so that all rows end at one column again, with as few columns as the longest row needs
  // (the padding that rows which left had made is given back). The state holds `new_positions` more
  // positions after that column, and storage for `reserve_rows` rows and `reserve_positions` more
  // positions in all, for append(). Either state may be empty.
  GenerationState join(GenerationState first, GenerationState second, int64_t new_positions,
                       int64_t reserve_rows = 0, int64_t reserve_positions = 0) const;
  // append: the rows of `more` added to `into` in place (into's reserved storage; nothing else
  // moves), each right-aligned to into's last column; false (nothing changed) when that cannot be:
  // no reserved room for the rows, a row longer than into's columns, or `new_positions` more
  // positions past the capacity.
  bool append(GenerationState& into, const GenerationState& more, int64_t new_positions) const;
  // keep_rows: as reorder, but rows move by copying them within the storage (no map; a join()ed
  // state keeps its reserved rows so). Drop-only orders that fill holes from the end copy one row
  // per row dropped.
  void keep_rows(GenerationState& state, const std::vector<int64_t>& rows) const;

  nn::Embedding& token_embedding;
  nn::Embedding* position_embedding = nullptr;          // learned positions
  nn::PositionalEncoding* positional_encoding = nullptr;  // sinusoidal positions
  std::vector<CausalBlock*> layers;
  nn::LayerNorm& final_norm;
  nn::Linear& lm_head;
  nn::Dropout& dropout;

 private:
  // Embeddings of ids (B, T) at positions (B, T) i32, plus dropout.
  Var embed(const Tensor& ids, const Tensor& positions) const;
  // The blocks and the final norm: hidden states (B, T, D), before the output projection.
  Var run_blocks(Var x, std::vector<nn::KVCache>* caches, const ops::AttentionMasks& masks,
                 std::vector<Tensor>* weights) const;
  std::vector<nn::Linear*> inference_linears() override;
  std::vector<nn::Embedding*> inference_embeddings() override;
  void init_gpt2_weights();
};

}  // namespace qkv::models
