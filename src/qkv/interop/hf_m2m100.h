// Hugging Face M2M100 and NLLB-200 (M2M100ForConditionalGeneration; model_type "m2m_100", which
// NLLB-200's dense checkpoints use too) <-> qkv encoder-decoder checkpoints (`qkv import --from hf`,
// `qkv export --to hf`).
// Read with CTranslate2's converter (python/ctranslate2/converters/transformers.py, M2M100Loader and
// NllbLoader) and transformers' modeling_m2m_100.py for what they need beyond the seed's
// Transformer, each a TransformerConfig option that exists already but one:
//   - pre-LN blocks with a final layer_norm in each stack (norm "pre": encoder_norm / decoder_norm);
//   - token embeddings scaled by sqrt(d_model) as scale_embedding says (true in every released
//     model: M2M100ScaledWordEmbedding), activation_function (ReLU in M2M100 and NLLB);
//   - sinusoidal positions as M2M100SinusoidalPositionalEmbedding computes them (positions
//     "sinusoidal_fairseq", the new option: tensor2tensor's frequencies, the sines in the first half
//     of the width, and fairseq's numbering from padding_idx + 1), not stored in the weights;
//   - one table for the encoder, the decoder and the output layer (an lm_head of its own when
//     tie_word_embeddings is false); no final_logits_bias, no layernorm_embedding;
//   - the special ids (hf_seq2seq.h's read_special_ids): pad 1, EOS 2, decoder start 2 (the EOS),
//     forced_bos_token_id (the target language's code) when the config has one.
// Refused by name: different encoder / decoder depths, heads or widths, activations qkv lacks,
// is_encoder_decoder false, separate encoder / decoder tables, the fairseq-era normalize_before /
// layernorm_embedding fields where they contradict what transformers builds, bad_words_ids other
// than the pad id, forced_eos_token_id other than the EOS, and a sparse (NLLB-MoE) layout.
//
// The tokenizer is copied when its files are there (text/multilingual_tokenizer.h): M2M100's
// vocab.json + sentencepiece.bpe.model (language tokens "__en__"), or NLLB's
// sentencepiece.bpe.model with tokenizer_config.json (language codes "eng_Latn"); a directory
// without them imports with a note and translates ids (`qkv translate --ids`).
//
// Names (HF, "model." prefix dropped -> qkv), besides those shared with BART (hf_seq2seq.h):
//   encoder.layer_norm / decoder.layer_norm    encoder_norm / decoder_norm
//   (encoder.embed_positions.weights: a buffer transformers does not save; a stored copy is refused
//   as unknown.)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/transformer.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "m2m_100") and DIR/generation_config.json (when present) as
// an encoder-decoder config. Errors name the file and the field.
models::TransformerConfig hf_m2m100_config(const std::string& hf_dir, std::vector<std::string>* notes = nullptr);

// Builds the model of a Hugging Face M2M100 / NLLB directory in memory. Errors name the file and
// the field or tensor.
std::unique_ptr<models::Transformer> load_hf_m2m100(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT` for M2M100 and NLLB, written all-or-nothing.
HfConversion import_hf_m2m100(const std::string& hf_dir, const std::string& out_dir);

// Whether an encoder-decoder config is M2M100's kind (positions "sinusoidal_fairseq").
bool is_m2m100_layout(const models::TransformerConfig& config);
// The Hugging Face config.json (model_type m2m_100, M2M100ForConditionalGeneration) of an
// M2M100-layout config. Refuses, naming the option, what M2M100 cannot express: post-LN, an
// embedding_norm, separate tables, and what hf_seq2seq.h's refuse_outside_seq2seq_layouts names.
std::string hf_m2m100_config_json(const models::TransformerConfig& config);
// `qkv export --to hf CKPT --out DIR` for an M2M100-layout checkpoint: config.json,
// generation_config.json (decoder start, EOS, pad, forced_eos_token_id, forced_bos_token_id when
// the model has one), model.safetensors with M2M100's names (no position table: transformers
// computes it; no final_logits_bias: an output layer with a bias other than zero is refused) and
// the tokenizer files the import kept (text/multilingual_tokenizer.h); written all-or-nothing.
HfConversion export_hf_m2m100(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
