// MultiHeadAttention as in seed 000: project Q, K, V, split into heads, scaled dot-product
// attention with masks, combine heads, project with W_o.
#pragma once
#include <array>
#include <vector>

#include "qkv/nn/layers.h"

namespace qkv::nn {

// Keys and values of the positions an attention layer has seen, for incremental decoding
// (inference only). Self-attention appends each new position; cross-attention projects the
// encoder output once (static: append is never called).
struct KVCache {
  Tensor k, v;          // (N, H, capacity, dk)
  int64_t length = 0;   // positions filled
  // i32 (n, capacity) once reorder() has moved rows, else undefined: position p of sequence i is
  // then in row key_rows[i, p] of k and v. Beam search reorders its sequences every step; moving
  // the map instead of the keys and values costs n x length integers, not n x length x d_model
  // floats twice per layer (the copies took 13% of translation's time). k and v keep every row
  // that was ever used: a row's position p is written once, at step p, and then only read.
  Tensor key_rows;
  // Set by KVCacheStorage::take: k and v are views of storage a caller keeps from batch to batch.
  // reorder then never gathers to give rows back (the storage stays anyway; a gather would only
  // add a copy and fault in new pages).
  bool kept_storage = false;
  // Allocates room for `capacity` positions of N sequences, as storage of its own (not the tensor
  // pool's): its pages count towards memory only once written, and most sentences end far below the
  // length limit the capacity is sized for. Pooled, a batch's caches were most of translation's
  // memory.
  // On a GPU (`device`), ordinary device memory.
  static KVCache with_capacity(int64_t N, int64_t num_heads, int64_t capacity, int64_t dk,
                               Device device = Device::cpu());
  // Keeps / duplicates sequences: sequence i becomes old sequence rows[i] (beam search, dropping
  // finished sequences). Moves the map; copies only when the batch grows past the rows allocated,
  // or when the sequences fit in half the rows (gathered into storage of their own, so that the
  // rows of ended sequences are given back). On a GPU the rows are copied (reorder_gathering's
  // way): no map, so attention reads every cache in place.
  void reorder(const std::vector<int64_t>& rows);
  // The same for a static cache (cross-attention's, read in place by forward_static) and for a
  // join()ed generation state: copies each row that changes, once, in place, so k and v stay views
  // of the storage they had (CausalLM::append re-slices that storage). A batch that grows past its
  // rows gets new storage. On a GPU: one gather into scratch and one copy back.
  void reorder_copying(const std::vector<int64_t>& rows);
  // As reorder_copying where the storage may change: on a GPU the rows are gathered into new,
  // whole storage, one launch a tensor (beam search's self- and cross-attention caches: no one
  // keeps views of them); on the CPU, reorder_copying itself.
  void reorder_gathering(const std::vector<int64_t>& rows);
  // Copies every sequence's keys and values into its own row (k and v in the order of the
  // sequences) and drops the map: for attention that needs them in place (more than a few queries).
  void gather_in_place();
  // The number of sequences (k and v may hold more rows).
  int64_t sequences() const { return key_rows.defined() ? key_rows.size(0) : k.size(0); }
};

// Self-attention key/value storage kept from one decoding batch to the next, for a caller that
// decodes many batches in a row (api::Translator). A new cache's pages are zero-filled by the
// kernel at their first write: on John (28 batches) that was 530,000 page faults (2 GB), half of
// translation's faults, which took 10% of its time. Batches that write into the same storage
// fault it in once. Per layer it holds (rows, H, capacity, dk) for the most rows asked for and the
// capacity given (the model's max_seq_length: only written positions take memory, so a batch of
// longer sentences never needs new storage). One search at a time: not thread-safe.
class KVCacheStorage {
 public:
  // Self-attention cache `layer` for N sequences of `length_limit` positions, in storage of
  // `capacity` >= length_limit positions: views of the kept storage when it has the rows, else new
  // storage, kept in its place.
  KVCache take(size_t layer, int64_t N, int64_t num_heads, int64_t length_limit, int64_t capacity, int64_t dk,
               Device device = Device::cpu());

 private:
  std::vector<KVCache> kept_;  // per layer: the whole storage
};

// Self-attention cache `layer` for N sequences of `length_limit` positions: from `storage` (whose
// capacity is `storage_capacity`) when the caller keeps one, else a cache of its own sized to the
// limit. What Transformer::start_decoding and CausalLM::prefill both do. On `device` (the model's).
// On a GPU the storage is sized to the limit too: cudaMalloc commits every byte, where the host's
// unwritten pages take no memory (a GPT-2-XL-shaped model at batch 32 would take 20 GB of cache
// for its whole context before a 20-token generation).
KVCache self_attention_cache(KVCacheStorage* storage, size_t layer, int64_t N, int64_t num_heads,
                             int64_t length_limit, int64_t storage_capacity, int64_t dk, Device device);

class MultiHeadAttention : public Module {
 public:
  // bias: the four projections have biases (T5's have none). width: what W_q, W_k, W_v project
  // to and W_o from, num_heads heads of width / num_heads; 0: d_model (the seed).
  MultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen, float attention_dropout = 0.f,
                     bool bias = true, int64_t width = 0);

  // Q (B, Tq, D); K, V (B, Tk, D) -> (B, Tq, D). masks: key padding / query rows / causal.
  // Every forward below takes an optional `weights`: when given, it receives the attention weights
  // (B, H, Tq, Tk) of this call, the softmax the fused op computes anyway (no extra work; for
  // pictures of what the model attends to). Null, the default, keeps nothing.
  // At inference the projections multiply with the layers' inference weights (nn::Linear).
  // position_bias, when defined: (Tq, Tk, H) added to every row's scores (T5's relative positions;
  // see ops::AttentionMasks::bias), with its gradient.
  Var forward(const Var& Q, const Var& K, const Var& V, const ops::AttentionMasks& masks,
              Tensor* weights = nullptr, const Var& position_bias = Var()) const;

  // The two halves of forward, for incremental decoding where keys and values are cached:
  // project: (B, T, D) -> split heads of W(x), (B, H, T, dk);
  // attend: W_o(combine_heads(attention(q, k, v))) -> (B, Tq, D).
  Var project(const Linear& W, const Var& x) const {
    return fn::split_heads(W.forward(x), num_heads_);
  }
  Var attend(const Var& q, const Var& k, const Var& v, const ops::AttentionMasks& masks,
             Tensor* weights = nullptr, const Var& position_bias = Var()) const;

  // Self-attention of x (N, T, D) at cache positions [length, length + T): appends the new keys and
  // values to `cache` and attends over positions [0, length + T). masks.key_keep, when given, covers
  // the cache's capacity; masks.causal hides later positions among the new ones.
  // weights: (N, H, T, length + T). position_bias: (T, length + T, H), as forward's.
  Var forward_cached(const Var& x, KVCache& cache, const ops::AttentionMasks& masks, Tensor* weights = nullptr,
                     const Var& position_bias = Var()) const;
  // Cross-attention of x (N, T, D) over a static cache of projected encoder keys and values.
  // With rows_per_source R > 1, rows come in groups of R that read the same source (the beams of one
  // sentence) and the cache holds one row per group (N / R): a group's queries attend together, so
  // the encoder's keys and values are read once per group. masks cover the cache's rows.
  // weights: (N, H, T, S) either way.
  Var forward_static(const Var& x, const KVCache& cache, const ops::AttentionMasks& masks, Tensor* weights = nullptr,
                     int64_t rows_per_source = 1) const;
  // The projected keys and values of `memory` (N, S, D), for forward_static.
  KVCache project_memory(const Var& memory) const;
  // softmax(Q K^T / sqrt(dk)) with the masks, (B, H, Tq, Tk): the attention weights, for
  // inspection and pictures (seed 003's scaled_dot_product_attention returns them). No gradient.
  Tensor attention_weights(const Var& Q, const Var& K, const ops::AttentionMasks& masks) const;

  int64_t num_heads() const { return num_heads_; }
  Linear &W_q, &W_k, &W_v, &W_o;

 private:
  // W_q(x), W_k(x) and W_v(x) of one input: at inference through ops::linear_forward_many (int8
  // weights quantize x once), else three forwards.
  std::array<Var, 3> self_projections(const Var& x) const;
  // Attention dropout for a call on B rows of Tq queries over Tk keys: off unless training; else
  // the generator's seed and a fresh counter range (as many draws as probabilities).
  ops::AttentionDropoutSpec dropout_spec(int64_t B, int64_t Tq, int64_t Tk) const;

  int64_t num_heads_;
  float attention_dropout_;
  Generator* gen_;
};

}  // namespace qkv::nn
