// Hugging Face Marian (OPUS-MT; MarianMTModel) -> qkv encoder-decoder checkpoints
// (`qkv import --from hf`). Read with CTranslate2's converter (python/ctranslate2/converters/
// transformers.py, MarianMTLoader) and transformers' modeling_marian.py for what Marian needs beyond
// the seed's Transformer, each a TransformerConfig option:
//   - post-LN blocks as the seed's, embeddings scaled by sqrt(d_model) (scale_embedding), SiLU
//     ("swish") or another activation, no layernorm_embedding;
//   - Marian's sinusoidal table: sines in the first half, cosines in the second (positions
//     "sinusoidal_halves"); the table is not stored in the weights (a stored copy is checked);
//   - final_logits_bias (1, V) added to the logits: the output layer's bias;
//   - the special ids of its config: pad = decoder_start_token_id (the last id in OPUS-MT), EOS 0;
//     qkv's bos_id is the decoder start, and target_query_mask is false (the decoder's first input
//     is the pad id, which the seed's mask would hide).
// config.json: vocab_size, decoder_vocab_size (the target vocabulary when
// share_encoder_decoder_embeddings is false), d_model, encoder_/decoder_layers, _attention_heads and
// _ffn_dim (qkv has one value for both stacks: different ones are refused by name),
// max_position_embeddings, activation_function, dropout, attention_dropout, activation_dropout,
// scale_embedding, share_encoder_decoder_embeddings, tie_word_embeddings, pad_token_id,
// eos_token_id, decoder_start_token_id. Refused by name: normalize_before / add_final_layer_norm /
// normalize_embedding / layernorm_embedding true (BART's and mBART's layouts, not Marian's),
// is_encoder_decoder false. generation_config.json's bad_words_ids may only name the pad id
// (qkv's search never chooses pad or the decoder start); other bad words are refused.
//
// Names (HF, "model." prefix dropped -> qkv, models/transformer.h):
//   shared.weight (V, D)                          encoder_embedding / decoder_embedding (shared);
//   encoder.embed_tokens / decoder.embed_tokens   (the same table when stored; separate tables when
//                                                 share_encoder_decoder_embeddings is false)
//   lm_head.weight                                fc.weight (tied to the decoder table unless
//                                                 tie_word_embeddings is false)
//   final_logits_bias (1, V)                      fc.bias (zeros when absent, as transformers loads it)
//   encoder.layers.N.self_attn.{q,k,v,out}_proj   encoder_layers.N.self_attn.W_q / W_k / W_v / W_o
//   encoder.layers.N.self_attn_layer_norm         encoder_layers.N.norm1
//   encoder.layers.N.fc1 / fc2 / final_layer_norm encoder_layers.N.feed_forward.fc1 / fc2, norm2
//   decoder.layers.N.self_attn / _layer_norm      decoder_layers.N.self_attn / norm1
//   decoder.layers.N.encoder_attn / _layer_norm   decoder_layers.N.cross_attn / norm2
//   decoder.layers.N.fc1 / fc2 / final_layer_norm decoder_layers.N.feed_forward.fc1 / fc2, norm3
// nn.Linear's layout is qkv's. The tokenizer (source.spm, target.spm, vocab.json, target_vocab.json,
// tokenizer_config.json: text/marian_tokenizer.h) is copied into the checkpoint.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/transformer.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "marian") and DIR/generation_config.json (when present) as an
// encoder-decoder config. Errors name the file and the field.
models::TransformerConfig hf_marian_config(const std::string& hf_dir, std::vector<std::string>* notes = nullptr);

// Builds the model of a Hugging Face Marian directory in memory. Errors name the file and the field
// or tensor.
std::unique_ptr<models::Transformer> load_hf_marian(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT` for Marian: the checkpoint plus the tokenizer files (checked
// to load and to fit the model's vocabularies), all-or-nothing. A directory without the tokenizer
// imports too (the checkpoint then translates ids only), with a note.
HfConversion import_hf_marian(const std::string& hf_dir, const std::string& out_dir);

// The Hugging Face config.json (model_type marian, MarianMTModel) of an encoder-decoder config.
// Refuses, naming the option, what MarianMTModel cannot express: pre-LN, the seed's interleaved
// sinusoidal table (Marian's is "sinusoidal_halves"), layer_norm seed003 or an eps other than
// nn.LayerNorm's 1e-5, a target_query_mask (transformers' decoder masks future keys only), and other
// families. generation_config.json: decoder start, EOS, pad and bad_words_ids [[pad]].
std::string hf_marian_config_json(const models::TransformerConfig& config);
std::string hf_marian_generation_config_json(const models::TransformerConfig& config);

// `qkv export --to hf CKPT --out DIR` for an encoder-decoder checkpoint: config.json,
// generation_config.json, model.safetensors (MarianMTModel's names, "model." prefix, shared.weight
// once when the tables are shared, lm_head.weight when untied, final_logits_bias) and the Marian
// tokenizer files when the checkpoint has them; written all-or-nothing.
HfConversion export_hf_marian(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
