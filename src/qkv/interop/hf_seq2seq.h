// What the importers and exporters of transformers' fairseq-style translation models share (Marian:
// hf_marian.*, BART and mBART: hf_bart.*, M2M100 and NLLB: hf_m2m100.*): their config.json fields
// read into one TransformerConfig and written back, and their tensor names, which are the same in
// all (BartForConditionalGeneration, MarianMTModel and M2M100ForConditionalGeneration come from one
// code base):
//   shared.weight, encoder.embed_tokens / decoder.embed_tokens, lm_head.weight, final_logits_bias
//   {encoder,decoder}.layers.N.self_attn.{q,k,v,out}_proj, self_attn_layer_norm, fc1, fc2,
//   final_layer_norm; decoder.layers.N.encoder_attn, encoder_attn_layer_norm.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/interop/hf_common.h"
#include "qkv/models/transformer.h"

namespace qkv::interop {

// One value for both stacks: qkv's config has one, these configs two (equal in every OPUS-MT and
// BART model); different ones are refused naming decoder_key.
int64_t same_in_both_stacks(const HfConfigReader& r, const char* encoder_key, const char* decoder_key, int64_t fallback,
                            int64_t max);
// activation_function as qkv names it ("swish"/"silu", "gelu", "relu", "gelu_new"); others refused.
std::string hf_activation(const HfConfigReader& r);
// The sizes a config.json leaves out default to its model class's (MarianConfig's, BartConfig's).
struct Seq2SeqDefaults {
  int64_t vocab_size, d_model, layers, heads, ffn_dim, max_position_embeddings;
};
// The fields both layouts share: vocabularies, sizes, dropouts, activation, scale_embedding, the
// tying of tables, nn.LayerNorm's eps, target_query_mask false (transformers' decoders mask future
// keys only) and a -1e9 fill (transformers fills with the dtype's minimum: masked probabilities
// are 0 either way).
void read_seq2seq_fields(const HfConfigReader& r, const Seq2SeqDefaults& defaults, models::TransformerConfig& c,
                         std::vector<std::string>* notes);
// generation_config.json's bad_words_ids (or config.json's, in files written before the split):
// only the pad id (or the decoder start) is accepted, which qkv's search never chooses anyway.
void check_bad_words(const std::string& hf_dir, const HfConfigReader& r, const models::TransformerConfig& c,
                     std::vector<std::string>* notes);

// The special ids of BART's family (BART, mBART, M2M100, NLLB): pad_token_id (default 1), EOS
// (default 2), decoder_start_token_id (or bos_token_id without one, as generate falls back) as
// bos_id, forced_bos_token_id as forced_bos_id; generation_config.json's values win over
// config.json's, as in generate. forced_eos_token_id other than the EOS is refused; generation
// defaults qkv does not apply (num_beams, length_penalty ...) are noted.
void read_special_ids(const std::string& hf_dir, const HfConfigReader& r, models::TransformerConfig& c,
                      std::vector<std::string>* notes);

// A Transformer of config `c` in eval mode whose parameters are left uninitialised: the importer
// reads every one (HfWeights::expect_all_taken says when one was not).
std::unique_ptr<models::Transformer> transformer_to_read(const models::TransformerConfig& c);

// Reads the tensors named above into a model built from the config.
class Seq2SeqWeightReader {
 public:
  Seq2SeqWeightReader(HfWeights& w, const models::TransformerConfig& c) : w_(w), c_(c), d_(c.d_model) {}

  void linear(const std::string& hf, nn::Linear& l, int64_t out, int64_t in);
  void norm(const std::string& hf, nn::LayerNorm& n);
  void attention(const std::string& hf, nn::MultiHeadAttention& a);
  void feed_forward(const std::string& hf, nn::PositionWiseFeedForward& f);
  // A tensor that must equal `expected` when the file stores it (tied tables saved twice).
  void same_if_stored(const std::string& name, const std::vector<float>& expected, int64_t rows, const std::string& why);
  // The token tables, the output layer (tied or lm_head) and final_logits_bias (zeros when absent,
  // as transformers loads it).
  void embeddings(models::Transformer& m);
  // Every encoder and decoder layer ("encoder.layers.N.", "decoder.layers.N.").
  void layers(models::Transformer& m);

 private:
  HfWeights& w_;
  const models::TransformerConfig& c_;
  int64_t d_;
};

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

// Refuses `what` when `bad`, as "export --to hf: WHAT: transformers' FAMILY cannot express it".
void refuse_for_export(const std::string& family, bool bad, const std::string& what);
// Refuses, naming the option, what none of these layouts has (`family` names the one in the
// message): a norm other than nn.LayerNorm with eps 1e-5, a target_query_mask (their decoders mask
// future keys only), heads that do not split d_model, linears without biases, a gated
// feed-forward, unscaled attention scores, a scaled decoder output, a shared table for two
// vocabulary sizes.
void refuse_outside_seq2seq_layouts(const models::TransformerConfig& c, const std::string& family);
// The config.json fields the layouts share (sizes in both stacks' names, dropouts, activation,
// scale_embedding, the special ids, forced_eos_token_id = EOS, tie_word_embeddings).
nlohmann::json seq2seq_config_fields(const models::TransformerConfig& c);
// generation_config.json's ids: decoder start, EOS, pad, forced_eos_token_id = EOS (qkv's search
// ends a hypothesis at its length limit with EOS) and forced_bos_token_id when the model has one.
nlohmann::json seq2seq_generation_fields(const models::TransformerConfig& c);

// The start of every encoder-decoder export (these types' and T5's): the checkpoint's config made
// into config.json by `config_json`, which refuses what the type cannot express before any weight
// is read, then the model.
struct Seq2SeqExport {
  HfExportFiles files;  // config_json set; the rest is the exporter's
  std::unique_ptr<models::Transformer> model;
};
Seq2SeqExport start_seq2seq_export(const std::string& checkpoint_dir,
                                   const std::function<std::string(const models::TransformerConfig&)>& config_json);

// Writes a model's tensors under the names above, with the "model." prefix of the classes with a
// head; nn.Linear's layout is qkv's.
class Seq2SeqTensorWriter {
 public:
  explicit Seq2SeqTensorWriter(io::StFile& file) : file_(file) {}

  void add(const std::string& name, const Tensor& t);
  void linear(const std::string& hf, const nn::Linear& l);
  void norm(const std::string& hf, const nn::LayerNorm& n);
  void attention(const std::string& hf, const nn::MultiHeadAttention& a);
  // shared.weight once when the stacks share a table (else one per stack), lm_head.weight when
  // untied, and final_logits_bias (the output layer's bias) when the layout has it.
  void embeddings(const models::Transformer& m, bool final_logits_bias);
  // Every encoder and decoder layer ("model.encoder.layers.N.", "model.decoder.layers.N.").
  void layers(const models::Transformer& m);

 private:
  io::StFile& file_;
};

}  // namespace qkv::interop
