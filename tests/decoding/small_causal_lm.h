// A small random decoder-only model for the generation tests: varied greedy continuations.
#pragma once
#include <memory>
#include <string>

#include "qkv/kernels/random.h"
#include "qkv/models/causal_lm.h"

namespace qkv::testing {

inline models::TransformerConfig small_config(int32_t eos_id = 3) {
  models::TransformerConfig c = models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 40;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 24;
  c.dropout = 0.f;
  c.eos_id = eos_id;
  return c;
}

// GPT-2's initialisation (std 0.02) gives nearly uniform logits, and greedy runs that repeat one
// token; weights drawn from U(-0.3, 0.3) (layer norms kept) make the continuations varied.
inline std::unique_ptr<models::CausalLM> small_model(int32_t eos_id = 3, uint64_t seed = 5) {
  auto m = std::make_unique<models::CausalLM>(small_config(eos_id), seed);
  uint64_t counter = 0;
  for (auto& [name, p] : m->named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    Tensor t = p.value();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.6f * (kernels::uniform01(seed, counter++) - 0.5f);
  }
  m->eval();
  return m;
}

}  // namespace qkv::testing
