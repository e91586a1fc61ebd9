// Hugging Face BERT -> qkv encoder-only checkpoints (`qkv import --from hf`).
//
// config.json (model_type "bert"): vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, hidden_act ("gelu" -> exact GELU; "gelu_new" / "gelu_pytorch_tanh" -> tanh
// approximation; "relu"), hidden_dropout_prob -> dropout, attention_probs_dropout_prob ->
// attention_dropout, max_position_embeddings, type_vocab_size, layer_norm_eps, pad_token_id,
// id2label (the classifier's labels, by id). Refused by name: another model_type,
// position_embedding_type other than "absolute", is_decoder / add_cross_attention true.
// [CLS], [SEP] and [MASK] ids come from tokenizer.json's vocabulary when the directory has one.
//
// Names (HF -> qkv, models/encoder_model.h); a "bert." prefix (BertForMaskedLM,
// BertForSequenceClassification) or none (BertModel, sentence-transformers) both read:
//   embeddings.word_embeddings / position_embeddings / token_type_embeddings
//                                 token_embedding / position_embedding / token_type_embedding
//   embeddings.LayerNorm          embedding_norm   (old files: gamma / beta for weight / bias)
//   encoder.layer.N.attention.self.query / key / value     layers.N.self_attn.W_q / W_k / W_v
//   encoder.layer.N.attention.output.dense / LayerNorm     layers.N.self_attn.W_o / layers.N.norm1
//   encoder.layer.N.intermediate.dense / output.dense      layers.N.feed_forward.fc1 / fc2
//   encoder.layer.N.output.LayerNorm                       layers.N.norm2
//   pooler.dense                  pooler           (optional: pooler false without it)
//   cls.predictions.transform.dense / LayerNorm    mlm_head.transform / mlm_head.norm
//   cls.predictions.bias          mlm_head.decoder.bias; cls.predictions.decoder.weight, when stored,
//                                 must equal the word embeddings (tied)      (optional: mlm_head)
//   classifier                    classifier       (optional: labels from id2label)
// nn.Linear's layout is qkv's, so no matrix is transposed. The int64 embeddings.position_ids buffer
// (arange) is checked and dropped; cls.seq_relationship (next-sentence prediction) is dropped with a
// note.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/encoder_model.h"

namespace qkv::interop {

// Reads DIR/config.json (model_type "bert") as an encoder-only config; heads and pooler are set
// later from the tensors present. `tokenizer_json` ("" if none) gives the special-token ids.
models::TransformerConfig hf_bert_config(const std::string& config_path, const std::string& tokenizer_json,
                                         std::vector<std::string>* notes = nullptr);

// Every parameter of `model` under its Hugging Face name without the "bert." prefix (the mapping
// above, in one place: import reads by it, tests compare gradients by it). The tied decoder weight
// is listed only when untied.
std::vector<std::pair<std::string, Var>> hf_bert_named_parameters(const models::EncoderModel& model);

// Builds the model of a Hugging Face BERT directory in memory. Errors name the file and the field
// or tensor.
std::unique_ptr<models::EncoderModel> load_hf_bert(const std::string& hf_dir, HfConversion* info = nullptr);

// `qkv import --from hf DIR --out CKPT` for BERT: the checkpoint plus DIR/tokenizer.json (its
// vocabulary checked against the embedding rows), and sentence-transformers' pooling settings
// (modules.json, 1_Pooling/config.json, sentence_bert_config.json) when present, all-or-nothing.
HfConversion import_hf_bert(const std::string& hf_dir, const std::string& out_dir);

}  // namespace qkv::interop
