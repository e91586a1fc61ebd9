// Hugging Face T5 (T5ForConditionalGeneration; model_type "t5", v1.0 and v1.1 layouts, and "mt5")
// -> qkv encoder-decoder checkpoints (`qkv import --from hf`). What T5 needs beyond the seed's
// Transformer (read with CTranslate2's T5Loader and transformers' modeling_t5.py), each a
// TransformerConfig option:
//   - pre-LN blocks with RMSNorm (layer_norm "rms", eps layer_norm_epsilon) and a final norm in
//     each stack; no biases anywhere (linear_bias false); no embedding scaling;
//   - no absolute positions: a relative position bias per head and bucket, computed in the first
//     layer of each stack and shared by all (positions "relative"); scores not divided by sqrt(dk)
//     (scale_attention_scores false);
//   - feed_forward_proj "relu" (v1.0), "gated-gelu" (v1.1, flan-t5: GELU's tanh form, as
//     transformers maps it to gelu_new) or "gated-silu" (gated_feed_forward);
//   - tie_word_embeddings true: the output layer is the shared table and the decoder output is
//     scaled by d_model^-0.5 first (scale_decoder_output); false: lm_head is a matrix of its own;
//   - the special ids of the config: pad = decoder start (0), EOS (1); target_query_mask false.
// d_kv x num_heads other than d_model (flan-t5-small, t5-v1_1-small: 6 heads of 64 in 512) is
// head_dim. Refused by name: num_decoder_layers != num_layers, another feed_forward_proj,
// is_encoder_decoder false.
//
// Names (HF -> qkv, models/transformer.h):
//   shared.weight (V, D)                                  encoder_embedding / decoder_embedding (one table)
//   lm_head.weight (untied only)                          fc.weight
//   encoder.block.N.layer.0.SelfAttention.{q,k,v,o}       encoder_layers.N.self_attn.W_q / W_k / W_v / W_o
//   encoder.block.0.layer.0.SelfAttention.relative_attention_bias   encoder_position_bias
//   encoder.block.N.layer.0.layer_norm / layer.1.layer_norm         encoder_layers.N.norm1 / norm2
//   encoder.block.N.layer.1.DenseReluDense.wi / wo        encoder_layers.N.feed_forward.fc1 / fc2
//     (gated: wi_0 -> fc1, wi_1 -> fc_up)
//   encoder.final_layer_norm                              encoder_norm
//   decoder.block.N.layer.0 (SelfAttention, layer_norm)   decoder_layers.N.self_attn, norm1
//   decoder.block.N.layer.1 (EncDecAttention, layer_norm) decoder_layers.N.cross_attn, norm2
//   decoder.block.N.layer.2 (DenseReluDense, layer_norm)  decoder_layers.N.feed_forward, norm3
//   decoder.block.0.layer.0.SelfAttention.relative_attention_bias   decoder_position_bias
//   decoder.final_layer_norm                              decoder_norm
// The tokenizer (spiece.model and tokenizer_config.json: text/t5_tokenizer.h) is copied into the
// checkpoint when the directory has it (checked to load and to fit the vocabulary), and exported back.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/transformer.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "t5" or "mt5") as an encoder-decoder config. Errors name the
// file and the field.
models::TransformerConfig hf_t5_config(const std::string& hf_dir, std::vector<std::string>* notes = nullptr);

// Builds the model of a Hugging Face T5 directory in memory. Errors name the file and the field or
// tensor.
std::unique_ptr<models::Transformer> load_hf_t5(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT` for T5, written all-or-nothing.
HfConversion import_hf_t5(const std::string& hf_dir, const std::string& out_dir);

// Whether an encoder-decoder config is T5's kind (relative positions): it exports as T5, the
// others as Marian.
bool is_t5_layout(const models::TransformerConfig& config);
// The Hugging Face config.json (model_type t5, T5ForConditionalGeneration) of a T5-layout config.
// Refuses, naming the option, what T5ForConditionalGeneration cannot express: post-LN, another
// norm than RMSNorm, biases, scaled scores or embeddings, separate tables, an output layer tied
// without the d_model^-0.5 scaling (or scaled without the tie), a target_query_mask.
std::string hf_t5_config_json(const models::TransformerConfig& config);
// `qkv export --to hf CKPT --out DIR` for a T5-layout checkpoint: config.json,
// generation_config.json, model.safetensors with T5's names (shared.weight once, lm_head.weight
// when untied) and the tokenizer files when the checkpoint has them; written all-or-nothing.
HfConversion export_hf_t5(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
