// T5's relative position bias: one learned value per head and bucket of a key's offset from its
// query, added to the attention scores (ops::AttentionMasks::bias) in place of absolute positions.
#pragma once
#include <cstdint>

#include "qkv/nn/layers.h"

namespace qkv::nn {

// The bucket of `offset` = key position - query position, as transformers' T5Attention.
// _relative_position_bucket computes it: bidirectional (the encoder) spends half the buckets on
// keys after the query; the rest (all of them when causal, where keys after the query count as 0)
// are offsets 0 .. max_exact - 1 exactly (max_exact = half the buckets left) and then
// logarithmically wider ones up to max_distance, the last bucket taking everything beyond. The
// logarithm is taken in float32 as torch does, so that the buckets match at their boundaries.
int32_t relative_position_bucket(int64_t offset, bool bidirectional, int64_t num_buckets, int64_t max_distance);

// weight (num_buckets, num_heads): T5's relative_attention_bias.weight, drawn N(0, 1 / d_model) as
// T5 initialises it. Registered under the name "weight" (an Embedding).
class RelativePositionBias : public Embedding {
 public:
  RelativePositionBias(int64_t num_buckets, int64_t max_distance, int64_t num_heads, int64_t d_model,
                       bool bidirectional, Generator& gen);
  // The bias of queries at positions [query_start, query_start + Tq) over keys [0, Tk): (Tq, Tk, H),
  // the layout attention reads it in, with the table's gradient.
  Var forward(int64_t query_start, int64_t Tq, int64_t Tk) const;

 private:
  int64_t num_buckets_, max_distance_;
  bool bidirectional_;
};

}  // namespace qkv::nn
