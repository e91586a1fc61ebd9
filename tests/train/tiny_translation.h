// What the Trainer's tests share: a translation model small enough to train in milliseconds.
#pragma once
#include "qkv/models/transformer.h"

namespace qkv::train {

inline models::TransformerConfig tiny_translation_config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 1;
  c.d_ff = 32;
  c.max_seq_length = 16;
  c.dropout = 0.1f;  // dropout on: resume must restore the RNG
  return c;
}

}  // namespace qkv::train
