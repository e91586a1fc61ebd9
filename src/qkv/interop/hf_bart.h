// Hugging Face BART and mBART (BartForConditionalGeneration, MBartForConditionalGeneration;
// model_type "bart", "mbart") <-> qkv encoder-decoder checkpoints (`qkv import --from hf`, `qkv
// export --to hf`). Read with
// CTranslate2's converter (python/ctranslate2/converters/transformers.py, BartLoader / MBartLoader)
// and transformers' modeling_bart.py / modeling_mbart.py for what they need beyond the seed's
// Transformer, each a TransformerConfig option:
//   - learned positions, a table per stack (positions "learned"): BartLearnedPositionalEmbedding
//     keeps max_position_embeddings + 2 rows and reads row p + 2 for position p, so the import
//     drops the first two rows (never read);
//   - layernorm_embedding after token table + positions in both stacks (embedding_norm);
//   - BART: post-LN blocks; mBART: pre-LN blocks with a final layer_norm in each stack (qkv's
//     pre-LN encoder_norm / decoder_norm); embeddings scaled by sqrt(d_model) as scale_embedding
//     says (bart-base: false; mBART: true); activation_function ("gelu": the exact GELU);
//   - the output layer tied to the shared table, plus final_logits_bias (the output layer's bias);
//   - the special ids: pad (1), EOS (2), decoder_start_token_id (BART: 2, the EOS; mBART without
//     one: bos_token_id, as generate falls back) as qkv's bos_id; forced_bos_token_id (mBART-50's
//     target language) as forced_bos_id, which qkv's search applies. generation_config.json's
//     values win over config.json's, as they do in generate.
// Refused by name: model_type other than bart / mbart, different encoder / decoder depths, heads
// or widths, activations qkv lacks, the fairseq-era fields of old configs where they contradict
// the layout transformers builds (normalize_before / add_final_layer_norm other than the model
// type's, normalize_embedding false, static_position_embeddings true, add_bias_logits true),
// forced_eos_token_id other than the EOS, bad_words_ids other than the pad id.
// BART's tokenizer.json (byte-level BPE with RobertaProcessing: <s> text </s>) is copied into the
// checkpoint (with tokenizer_config.json) when qkv reads it and it fits the vocabulary; the
// Translator then takes text and decodes without the added tokens, as transformers'
// decode(skip_special_tokens=True), cleaning up spaces when tokenizer_config.json asks for it. A
// directory with the slow tokenizer's vocab.json and merges.txt but no tokenizer.json (transformers
// before 4.34) gets the tokenizer.json transformers makes of them (text/legacy_bpe_files.h).
// mBART's SentencePiece tokenizer (sentencepiece.bpe.model with tokenizer_config.json:
// MBartTokenizer or MBart50Tokenizer, text/multilingual_tokenizer.h) is copied when it is there and
// fits; without it an mBART checkpoint translates ids only (`qkv translate --ids`), with a note.
//
// Names (HF, "model." prefix dropped -> qkv, models/transformer.h), besides the layers' and tables'
// names shared with Marian (hf_seq2seq.h):
//   encoder.embed_positions.weight (P + 2, D)   encoder_position_embedding (rows 2..)
//   decoder.embed_positions.weight (P + 2, D)   decoder_position_embedding (rows 2..)
//   encoder.layernorm_embedding / decoder.      encoder_embedding_norm / decoder_embedding_norm
//   encoder.layer_norm / decoder.layer_norm     encoder_norm / decoder_norm (mBART)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/transformer.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "bart" or "mbart") and DIR/generation_config.json (when
// present) as an encoder-decoder config. Errors name the file and the field.
models::TransformerConfig hf_bart_config(const std::string& hf_dir, std::vector<std::string>* notes = nullptr);

// Builds the model of a Hugging Face BART / mBART directory in memory. Errors name the file and the
// field or tensor.
std::unique_ptr<models::Transformer> load_hf_bart(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT` for BART and mBART, written all-or-nothing.
HfConversion import_hf_bart(const std::string& hf_dir, const std::string& out_dir);

// Whether an encoder-decoder config is BART's kind (learned positions): it exports as BART
// (post-LN) or mBART (pre-LN).
bool is_bart_layout(const models::TransformerConfig& config);
// The Hugging Face config.json (model_type bart, BartForConditionalGeneration, for a post-LN
// config; mbart, MBartForConditionalGeneration, for a pre-LN one). Refuses, naming the option, what
// they cannot express: positions other than "learned", no embedding_norm (both stacks have
// layernorm_embedding), separate tables, and what hf_seq2seq.h's refuse_outside_seq2seq_layouts
// names.
std::string hf_bart_config_json(const models::TransformerConfig& config);
// `qkv export --to hf CKPT --out DIR` for a BART-layout checkpoint: config.json,
// generation_config.json (decoder start, EOS, pad, forced_eos_token_id, forced_bos_token_id when
// the model has one), model.safetensors with BART's names (the position tables with the two rows
// of the offset in front, zeros, never read; mBART's final layer_norms) and the tokenizer files
// the import kept (BART's tokenizer.json and tokenizer_config.json, or mBART's
// sentencepiece.bpe.model and tokenizer_config.json); written all-or-nothing.
HfConversion export_hf_bart(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
