#include "qkv/interop/hf_seq2seq.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;
using models::TransformerConfig;

namespace {
// The generation settings that decide which ids come out: generation_config.json's when it has
// them (generate reads that file), else config.json's.
class GenerationFields {
 public:
  GenerationFields(const std::string& hf_dir, const HfConfigReader& config) : config_(config) {
    const std::string path = hf_dir + "/generation_config.json";
    std::error_code ec;
    if (fs::exists(path, ec)) generation_.emplace(path, parse_json_object(path, "a generation config"));
  }
  const HfConfigReader& source(const char* key) const {
    return generation_ && generation_->has(key) ? *generation_ : config_;
  }
  bool has(const char* key) const { return source(key).has(key); }
  int64_t id(const char* key, int64_t fallback, int64_t vocab) const { return source(key).integer(key, fallback, 0, vocab - 1); }

 private:
  const HfConfigReader& config_;
  std::optional<HfConfigReader> generation_;
};

}  // namespace

void read_special_ids(const std::string& hf_dir, const HfConfigReader& r, TransformerConfig& c,
                      std::vector<std::string>* notes) {
  const GenerationFields g(hf_dir, r);
  const int64_t V = c.tgt_vocab_size;
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 1, 0, V - 1));
  c.eos_id = static_cast<int32_t>(g.id("eos_token_id", 2, V));
  // generate starts from decoder_start_token_id, or from bos_token_id when there is none (mBART).
  c.bos_id = static_cast<int32_t>(g.has("decoder_start_token_id") ? g.id("decoder_start_token_id", 2, V)
                                                                   : g.id("bos_token_id", 0, V));
  if (g.has("forced_bos_token_id")) c.forced_bos_id = static_cast<int32_t>(g.id("forced_bos_token_id", 0, V));
  if (g.has("forced_eos_token_id")) {
    const int64_t forced_eos = g.id("forced_eos_token_id", c.eos_id, V);
    if (forced_eos != c.eos_id)
      g.source("forced_eos_token_id")
          .fail("forced_eos_token_id", "is " + std::to_string(forced_eos) + " but the EOS is " + std::to_string(c.eos_id) +
                                           ": not supported (qkv's search ends a hypothesis at its length limit with EOS)");
    if (notes) notes->push_back("forced_eos_token_id " + std::to_string(forced_eos) +
                                ": qkv's search ends every hypothesis at its length limit with EOS");
  }
  for (const char* key : {"no_repeat_ngram_size", "min_length", "repetition_penalty", "num_beams", "length_penalty"})
    if (g.has(key) && notes)
      notes->push_back(std::string(key) + " " + g.source(key).raw().at(key).dump() +
                       " is a generation default of the model, not applied (give qkv translate's options instead)");
}


int64_t same_in_both_stacks(const HfConfigReader& r, const char* encoder_key, const char* decoder_key, int64_t fallback,
                            int64_t max) {
  const int64_t e = r.integer(encoder_key, fallback, 1, max), d = r.integer(decoder_key, e, 1, max);
  if (e != d)
    r.fail(decoder_key, "is " + std::to_string(d) + " but " + encoder_key + " is " + std::to_string(e) +
                            ": not supported (qkv's encoder and decoder have the same size)");
  return e;
}

std::string hf_activation(const HfConfigReader& r) {
  const std::string act = r.string("activation_function", "gelu");
  if (act == "swish" || act == "silu") return "silu";
  if (act == "gelu") return "gelu";
  if (act == "relu") return "relu";
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  r.fail("activation_function", "is \"" + act + "\": not supported (qkv has \"swish\"/\"silu\", \"gelu\", \"relu\", "
                                "\"gelu_new\")");
}

void read_seq2seq_fields(const HfConfigReader& r, const Seq2SeqDefaults& defaults, TransformerConfig& c,
                         std::vector<std::string>* notes) {
  c.src_vocab_size = r.integer("vocab_size", defaults.vocab_size, 1, models::kMaxVocabSize);
  c.share_embeddings = r.boolean("share_encoder_decoder_embeddings", true);
  c.tgt_vocab_size = r.integer("decoder_vocab_size", c.src_vocab_size, 1, models::kMaxVocabSize);
  if (c.share_embeddings && c.tgt_vocab_size != c.src_vocab_size)
    r.fail("decoder_vocab_size", "is " + std::to_string(c.tgt_vocab_size) + " but vocab_size is " +
                                     std::to_string(c.src_vocab_size) + " and share_encoder_decoder_embeddings is true");
  c.d_model = r.integer("d_model", defaults.d_model, 1, models::kMaxWidth);
  c.num_layers = same_in_both_stacks(r, "encoder_layers", "decoder_layers", defaults.layers, models::kMaxLayers);
  c.num_heads = same_in_both_stacks(r, "encoder_attention_heads", "decoder_attention_heads", defaults.heads,
                                    models::kMaxWidth);
  if (c.d_model % c.num_heads != 0)
    r.fail("encoder_attention_heads", "is " + std::to_string(c.num_heads) + ", which does not divide d_model " +
                                          std::to_string(c.d_model));
  c.d_ff = same_in_both_stacks(r, "encoder_ffn_dim", "decoder_ffn_dim", defaults.ffn_dim, models::kMaxWidth);
  c.max_seq_length = r.integer("max_position_embeddings", defaults.max_position_embeddings, 1, models::kMaxSeqLength);
  c.activation = hf_activation(r);
  c.dropout = static_cast<float>(r.number("dropout", 0.1, 0, 0.999));
  c.attention_dropout = static_cast<float>(r.number("attention_dropout", 0, 0, 0.999));
  c.ffn_dropout = static_cast<float>(r.number("activation_dropout", 0, 0, 0.999));
  c.scale_embeddings = r.boolean("scale_embedding", false);
  c.tie_output_embedding = r.boolean("tie_word_embeddings", true);
  c.layer_norm_eps = 1e-5f;  // nn.LayerNorm's default, which both layouts' layers use
  c.target_query_mask = false;
  c.mask_fill = "-1e9";
  if (notes && c.ffn_dropout > 0)
    notes->push_back("activation_dropout " + std::to_string(c.ffn_dropout) + " is ffn_dropout (training only)");
}

void check_bad_words(const std::string& hf_dir, const HfConfigReader& r, const TransformerConfig& c,
                     std::vector<std::string>* notes) {
  const std::string generation_path = hf_dir + "/generation_config.json";
  std::error_code ec;
  json bad = r.has("bad_words_ids") ? r.raw().at("bad_words_ids") : json();
  std::string where = r.path();
  if (fs::exists(generation_path, ec)) {
    const json g = parse_json_object(generation_path, "a generation config");
    if (g.contains("bad_words_ids") && !g.at("bad_words_ids").is_null()) {
      bad = g.at("bad_words_ids");
      where = generation_path;
    }
  }
  if (bad.is_null()) return;
  const bool only_pad = bad.is_array() && std::all_of(bad.begin(), bad.end(), [&](const json& words) {
    return words.is_array() && words.size() == 1 && words[0].is_number_integer() &&
           (words[0].get<int64_t>() == c.pad_id || (words[0].get<int64_t>() == c.bos_id && c.bos_id != c.eos_id));
  });
  QKV_CHECK(only_pad, where << ": field \"bad_words_ids\" is " << bad.dump()
                            << ": not supported (qkv's search never chooses the pad id " << c.pad_id
                            << "; it has no other banned words)");
  if (notes) notes->push_back("bad_words_ids " + bad.dump() + ": the pad id, which qkv's search never chooses");
}

std::unique_ptr<models::Transformer> transformer_to_read(const TransformerConfig& c) {
  std::unique_ptr<models::Transformer> model;
  {
    const nn::SkipRandomInitGuard no_init;
    model = std::make_unique<models::Transformer>(c, 0);
  }
  model->eval();
  return model;
}

void Seq2SeqWeightReader::linear(const std::string& hf, nn::Linear& l, int64_t out, int64_t in) {
  copy_into(w_.take(hf + ".weight", {out, in}, "nn.Linear (out, in)"), 0, l.weight.value());
  copy_into(w_.take(hf + ".bias", {out}, "out features"), 0, l.bias.value());
}

void Seq2SeqWeightReader::norm(const std::string& hf, nn::LayerNorm& n) {
  copy_into(w_.take(hf + ".weight", {d_}, "d_model"), 0, n.weight.value());
  copy_into(w_.take(hf + ".bias", {d_}, "d_model"), 0, n.bias.value());
}

void Seq2SeqWeightReader::attention(const std::string& hf, nn::MultiHeadAttention& a) {
  linear(hf + ".q_proj", a.W_q, d_, d_);
  linear(hf + ".k_proj", a.W_k, d_, d_);
  linear(hf + ".v_proj", a.W_v, d_, d_);
  linear(hf + ".out_proj", a.W_o, d_, d_);
}

void Seq2SeqWeightReader::feed_forward(const std::string& hf, nn::PositionWiseFeedForward& f) {
  linear(hf + "fc1", f.fc1, c_.d_ff, d_);
  linear(hf + "fc2", f.fc2, d_, c_.d_ff);
}

void Seq2SeqWeightReader::same_if_stored(const std::string& name, const std::vector<float>& expected, int64_t rows,
                                         const std::string& why) {
  if (!w_.has(name)) return;
  const std::vector<float> stored = w_.take(name, {rows, d_}, why);
  QKV_CHECK(stored.size() == expected.size() &&
                std::memcmp(stored.data(), expected.data(), sizeof(float) * stored.size()) == 0,
            w_.path() << ": tensor '" << name << "' differs from the table it is tied to (" << why << ")");
}

void Seq2SeqWeightReader::embeddings(models::Transformer& m) {
  const int64_t D = c_.d_model, S = c_.src_vocab_size, T = c_.tgt_vocab_size;
  std::vector<float> decoder_table;
  if (c_.share_embeddings) {
    const bool shared = w_.has("shared.weight");
    const std::string name = shared ? "shared.weight" : "encoder.embed_tokens.weight";
    decoder_table = w_.take(name, {S, D}, "vocab_size x d_model");
    copy_into(decoder_table, 0, m.decoder_embedding.weight.value());  // the encoder's is the same tensor
    same_if_stored("encoder.embed_tokens.weight", decoder_table, S, "share_encoder_decoder_embeddings");
    same_if_stored("decoder.embed_tokens.weight", decoder_table, S, "share_encoder_decoder_embeddings");
  } else {
    copy_into(w_.take("encoder.embed_tokens.weight", {S, D}, "vocab_size x d_model"), 0,
              m.encoder_embedding.weight.value());
    decoder_table = w_.take("decoder.embed_tokens.weight", {T, D}, "decoder_vocab_size x d_model");
    copy_into(decoder_table, 0, m.decoder_embedding.weight.value());
    if (w_.has("shared.weight")) w_.skip("shared.weight");  // transformers keeps an unused table there
  }
  if (c_.tie_output_embedding)
    same_if_stored("lm_head.weight", decoder_table, T, "tie_word_embeddings");
  else
    copy_into(w_.take("lm_head.weight", {T, D}, "decoder_vocab_size x d_model; tie_word_embeddings is false"), 0,
              m.fc.weight.value());
  Tensor& bias = m.fc.bias.value();
  if (w_.has("final_logits_bias")) copy_into(w_.take("final_logits_bias", {1, T}, "1 x decoder_vocab_size"), 0, bias);
  else bias.zero();
}

void Seq2SeqWeightReader::layers(models::Transformer& m) {
  for (int64_t l = 0; l < c_.num_layers; ++l) {
    const std::string e = "encoder.layers." + std::to_string(l) + ".", d = "decoder.layers." + std::to_string(l) + ".";
    models::EncoderLayer& enc = *m.encoder_layers[static_cast<size_t>(l)];
    attention(e + "self_attn", enc.self_attn);
    norm(e + "self_attn_layer_norm", enc.norm1);
    feed_forward(e, enc.feed_forward);
    norm(e + "final_layer_norm", enc.norm2);
    models::DecoderLayer& dec = *m.decoder_layers[static_cast<size_t>(l)];
    attention(d + "self_attn", dec.self_attn);
    norm(d + "self_attn_layer_norm", dec.norm1);
    attention(d + "encoder_attn", dec.cross_attn);
    norm(d + "encoder_attn_layer_norm", dec.norm2);
    feed_forward(d, dec.feed_forward);
    norm(d + "final_layer_norm", dec.norm3);
  }
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

void refuse_for_export(const std::string& family, bool bad, const std::string& what) {
  QKV_CHECK(!bad, "export --to hf: " << what << ": transformers' " << family << " cannot express it");
}

void refuse_outside_seq2seq_layouts(const TransformerConfig& c, const std::string& family) {
  const auto refuse = [&](bool bad, const std::string& what) { refuse_for_export(family, bad, what); };
  refuse(c.layer_norm != "standard", "layer_norm \"" + c.layer_norm + "\" (" + family + " uses nn.LayerNorm)");
  refuse(c.layer_norm_eps != 1e-5f, "layer_norm_eps " + std::to_string(c.layer_norm_eps) + " (" + family + "'s is 1e-5)");
  refuse(c.target_query_mask, "target_query_mask true (transformers' decoder masks future keys only)");
  refuse(c.head_dim > 0, "head_dim " + std::to_string(c.head_dim) + " (" + family + "'s heads split d_model)");
  refuse(!c.linear_bias, "linear_bias false (" + family + "'s linears have biases)");
  refuse(c.gated_feed_forward, "gated_feed_forward true (" + family + "'s feed-forward is fc1, activation, fc2)");
  refuse(!c.scale_attention_scores, "scale_attention_scores false (" + family + " divides scores by sqrt(dk))");
  refuse(c.scale_decoder_output, "scale_decoder_output true (" + family + " does not scale the decoder output)");
  refuse(c.share_embeddings && c.src_vocab_size != c.tgt_vocab_size, "share_embeddings with two vocabulary sizes");
}

namespace {
// activation as transformers' ACT2FN names it.
std::string hf_activation_name(const std::string& qkv_name) {
  if (qkv_name == "silu") return "swish";
  if (qkv_name == "gelu_tanh") return "gelu_new";
  return qkv_name;  // relu, gelu
}
}  // namespace

json seq2seq_config_fields(const TransformerConfig& c) {
  json j = json::object();
  j["activation_dropout"] = shortest(c.ffn_dropout);
  j["activation_function"] = hf_activation_name(c.activation);
  j["attention_dropout"] = shortest(c.attention_dropout);
  j["d_model"] = c.d_model;
  j["decoder_attention_heads"] = c.num_heads;
  j["decoder_ffn_dim"] = c.d_ff;
  j["decoder_layers"] = c.num_layers;
  j["decoder_start_token_id"] = c.bos_id;
  j["dropout"] = shortest(c.dropout);
  j["encoder_attention_heads"] = c.num_heads;
  j["encoder_ffn_dim"] = c.d_ff;
  j["encoder_layers"] = c.num_layers;
  j["eos_token_id"] = c.eos_id;
  j["forced_eos_token_id"] = c.eos_id;
  j["is_encoder_decoder"] = true;
  j["max_position_embeddings"] = c.max_seq_length;
  j["num_hidden_layers"] = c.num_layers;
  j["pad_token_id"] = c.pad_id;
  j["scale_embedding"] = c.scale_embeddings;
  j["tie_word_embeddings"] = c.tie_output_embedding;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.src_vocab_size;
  return j;
}

json seq2seq_generation_fields(const TransformerConfig& c) {
  json j = json::object();
  j["decoder_start_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  if (c.forced_bos_id >= 0) j["forced_bos_token_id"] = c.forced_bos_id;
  j["forced_eos_token_id"] = c.eos_id;
  j["pad_token_id"] = c.pad_id;
  return j;
}

Seq2SeqExport start_seq2seq_export(const std::string& checkpoint_dir,
                                   const std::function<std::string(const TransformerConfig&)>& config_json) {
  models::check_checkpoint_dir(checkpoint_dir);
  Seq2SeqExport out;
  out.files.config_json = config_json(models::load_config(checkpoint_dir + "/config.json"));
  out.model = models::load_seq2seq(checkpoint_dir);
  return out;
}

void Seq2SeqTensorWriter::add(const std::string& name, const Tensor& t) { file_.tensors.push_back(f32_tensor_of(name, t)); }

void Seq2SeqTensorWriter::linear(const std::string& hf, const nn::Linear& l) {
  add(hf + ".weight", l.weight.value());
  add(hf + ".bias", l.bias.value());
}

void Seq2SeqTensorWriter::norm(const std::string& hf, const nn::LayerNorm& n) {
  add(hf + ".weight", n.weight.value());
  add(hf + ".bias", n.bias.value());
}

void Seq2SeqTensorWriter::attention(const std::string& hf, const nn::MultiHeadAttention& a) {
  linear(hf + ".q_proj", a.W_q);
  linear(hf + ".k_proj", a.W_k);
  linear(hf + ".v_proj", a.W_v);
  linear(hf + ".out_proj", a.W_o);
}

void Seq2SeqTensorWriter::embeddings(const models::Transformer& m, bool final_logits_bias) {
  const TransformerConfig& c = m.config();
  if (c.share_embeddings) {
    add("model.shared.weight", m.decoder_embedding.weight.value());
  } else {
    add("model.encoder.embed_tokens.weight", m.encoder_embedding.weight.value());
    add("model.decoder.embed_tokens.weight", m.decoder_embedding.weight.value());
  }
  if (!c.tie_output_embedding) add("lm_head.weight", m.fc.weight.value());
  if (final_logits_bias) add("final_logits_bias", m.fc.bias.value().reshape(Dims{1, c.tgt_vocab_size}));
}

void Seq2SeqTensorWriter::layers(const models::Transformer& m) {
  for (int64_t l = 0; l < m.config().num_layers; ++l) {
    const std::string e = "model.encoder.layers." + std::to_string(l) + ".";
    const std::string d = "model.decoder.layers." + std::to_string(l) + ".";
    const models::EncoderLayer& enc = *m.encoder_layers[static_cast<size_t>(l)];
    attention(e + "self_attn", enc.self_attn);
    norm(e + "self_attn_layer_norm", enc.norm1);
    linear(e + "fc1", enc.feed_forward.fc1);
    linear(e + "fc2", enc.feed_forward.fc2);
    norm(e + "final_layer_norm", enc.norm2);
    const models::DecoderLayer& dec = *m.decoder_layers[static_cast<size_t>(l)];
    attention(d + "self_attn", dec.self_attn);
    norm(d + "self_attn_layer_norm", dec.norm1);
    attention(d + "encoder_attn", dec.cross_attn);
    norm(d + "encoder_attn_layer_norm", dec.norm2);
    linear(d + "fc1", dec.feed_forward.fc1);
    linear(d + "fc2", dec.feed_forward.fc2);
    norm(d + "final_layer_norm", dec.norm3);
  }
}

}  // namespace qkv::interop
