// T5 v1.1's options of the encoder-decoder (models/config.h), put on a config of any size: RMSNorm
// (pre-norm), relative position bias (8 buckets, max distance 12), unscaled scores, no linear biases,
// gated GELU (tanh), tied and scaled output, and heads of `head_dim` (not d_model / heads). Shared by
// the CPU's T5 layout tests and the GPU's.
#pragma once
#include <cstdint>

#include "qkv/models/config.h"

namespace qkv::testing {

inline models::TransformerConfig with_t5_layout(models::TransformerConfig c, int64_t head_dim) {
  c.norm = models::NormPosition::Pre;
  c.layer_norm = "rms";
  c.layer_norm_eps = 1e-6f;
  c.positions = "relative";
  c.relative_attention_num_buckets = 8;
  c.relative_attention_max_distance = 12;
  c.scale_attention_scores = false;
  c.linear_bias = false;
  c.gated_feed_forward = true;
  c.activation = "gelu_tanh";
  c.share_embeddings = c.tie_output_embedding = c.scale_decoder_output = true;
  c.target_query_mask = false;
  c.head_dim = head_dim;
  return c;
}

}  // namespace qkv::testing
