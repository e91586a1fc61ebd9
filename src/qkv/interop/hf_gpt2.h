// Hugging Face GPT-2 <-> qkv decoder-only checkpoints (`qkv import --from hf`, `qkv export --to hf`).
//
// A Hugging Face model directory holds config.json (model_type "gpt2"), model.safetensors and,
// optionally, tokenizer.json. The names are mapped once, here (HF -> qkv, models/causal_lm.h):
//   wte.weight (V, D)                  token_embedding.weight
//   wpe.weight (P, D)                  position_embedding.weight
//   h.N.ln_1 / h.N.ln_2                layers.N.norm1 / layers.N.norm2
//   h.N.attn.c_attn.weight (D, 3D)     layers.N.self_attn.W_q / W_k / W_v .weight (D, D) each: the
//   h.N.attn.c_attn.bias (3D)          output columns [0, D), [D, 2D), [2D, 3D), transposed
//   h.N.attn.c_proj.weight (D, D)      layers.N.self_attn.W_o.weight, transposed
//   h.N.mlp.c_fc.weight (D, F)         layers.N.feed_forward.fc1.weight (F, D), transposed
//   h.N.mlp.c_proj.weight (F, D)       layers.N.feed_forward.fc2.weight (D, F), transposed
//   ln_f                               final_norm
//   lm_head.weight (V, D)              lm_head.weight (only when tie_word_embeddings is false)
// GPT-2's Conv1D stores its weight as (in, out), the transpose of nn.Linear's (out, in); biases are
// the same. Keys may carry the "transformer." prefix (GPT2LMHeadModel) or not (GPT2Model); the
// attn.bias / attn.masked_bias buffers of old checkpoints (the causal mask) are ignored. F16 and
// BF16 weights are widened to float32 exactly.
//
// config.json: n_embd, n_head, n_layer, n_inner (null: 4 * n_embd), n_positions, vocab_size,
// layer_norm_epsilon, activation_function ("gelu_new" -> gelu_tanh, "gelu" -> erf GELU), resid_pdrop
// and embd_pdrop -> dropout, attn_pdrop -> attention_dropout, bos/eos_token_id, tie_word_embeddings
// (default true). Options qkv cannot compute are refused by name: another model_type,
// scale_attn_weights false, scale_attn_by_inverse_layer_idx true, reorder_and_upcast_attn true,
// add_cross_attention true, another activation. Fields that do not change the language model's
// output (summary_*, initializer_range, use_cache, generation settings, ...) are ignored.
//
// Masking: GPT-2 fills masked scores with the dtype's minimum, a finite number, so a fully masked
// row (a left-padding position) attends uniformly instead of turning into NaN. The imported model
// uses mask_fill "-1e9", which behaves the same way: masked probabilities underflow to exactly 0
// either way, and qkv's left-padded batched generation (whose padding rows are fully masked) never
// sees a NaN, which "-inf" would produce there and spread through 0 * NaN in the value products.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/causal_lm.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "gpt2") as a decoder-only TransformerConfig. Errors name the
// file and the field. `notes` (may be null) receives choices made on the way.
models::TransformerConfig hf_gpt2_config(const std::string& config_path, std::vector<std::string>* notes = nullptr);

// Builds the model of a Hugging Face GPT-2 directory in memory (config.json + model.safetensors).
// Errors name the file and the field or tensor: a missing, mis-shaped, non-float, non-finite or
// unexpected tensor, tied weights that differ.
std::unique_ptr<models::CausalLM> load_hf_gpt2(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT`: the checkpoint (config.json, model.safetensors, manifest),
// plus DIR/tokenizer.json when present (checked to be a byte-level BPE qkv reads, no larger than the
// model's vocabulary), written all-or-nothing.
HfConversion import_hf_gpt2(const std::string& hf_dir, const std::string& out_dir);

// The Hugging Face config.json (model_type gpt2, GPT2LMHeadModel) of a decoder-only config. Refuses,
// naming the option, what transformers' GPT-2 cannot express: sinusoidal positions, seed003
// layer_norm, ffn_dropout > 0, relu activation, scale_embeddings, and encoder-decoder models.
std::string hf_gpt2_config_json(const models::TransformerConfig& config);

// `qkv export --to hf CKPT --out DIR`: config.json, model.safetensors (GPT2LMHeadModel's names, Conv1D
// layout, "transformer." prefix; lm_head.weight only when untied) and the checkpoint's tokenizer.json
// when it has one; written all-or-nothing (the directory also gets qkv's manifest.json, which
// transformers ignores).
HfConversion export_hf_gpt2(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
