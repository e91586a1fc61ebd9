#include "qkv/interop/hf_t5.h"

#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/interop/hf_seq2seq.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/t5_tokenizer.h"

namespace qkv::interop {

using nlohmann::json;
using models::TransformerConfig;

namespace {

// feed_forward_proj: "relu" (v1.0) or "gated-<act>" (v1.1); transformers reads "gated-gelu" as
// gelu_new, GELU's tanh form.
void read_feed_forward(const HfConfigReader& r, TransformerConfig& c) {
  const std::string proj = r.string("feed_forward_proj", "relu");
  const bool gated = proj.rfind("gated-", 0) == 0;
  const std::string act = gated ? proj.substr(6) : proj;
  c.gated_feed_forward = gated;
  if (act == "relu") c.activation = "relu";
  else if (act == "gelu" || act == "gelu_new") c.activation = gated || act == "gelu_new" ? "gelu_tanh" : "gelu";
  else if (act == "silu" || act == "swish") c.activation = "silu";
  else r.fail("feed_forward_proj", "is \"" + proj + "\": not supported (qkv has \"relu\", \"gelu\", \"gated-gelu\", "
                                   "\"gated-relu\", \"gated-silu\")");
}

void read_sizes(const HfConfigReader& r, TransformerConfig& c) {
  c.src_vocab_size = c.tgt_vocab_size = r.integer("vocab_size", 32128, 1, models::kMaxVocabSize);
  c.d_model = r.integer("d_model", 512, 1, models::kMaxWidth);
  c.num_heads = r.integer("num_heads", 8, 1, models::kMaxWidth);
  const int64_t d_kv = r.integer("d_kv", 64, 1, models::kMaxWidth);
  if (d_kv * c.num_heads > models::kMaxWidth)
    r.fail("d_kv", "is " + std::to_string(d_kv) + " with num_heads " + std::to_string(c.num_heads) +
                       ": the heads' width is more than " + std::to_string(models::kMaxWidth));
  // Heads that do not split d_model (flan-t5-small: 6 of 64 in 512) get a width of their own.
  if (d_kv * c.num_heads != c.d_model) c.head_dim = d_kv;
  c.d_ff = r.integer("d_ff", 2048, 1, models::kMaxWidth);
  c.num_layers = r.integer("num_layers", 6, 1, models::kMaxLayers);
  const int64_t decoder_layers = r.integer("num_decoder_layers", c.num_layers, 1, models::kMaxLayers);
  if (decoder_layers != c.num_layers)
    r.fail("num_decoder_layers", "is " + std::to_string(decoder_layers) + " but num_layers is " +
                                     std::to_string(c.num_layers) + ": not supported (qkv's stacks have one depth)");
  c.relative_attention_num_buckets = r.integer("relative_attention_num_buckets", 32, 4, 1024);
  c.relative_attention_max_distance =
      r.integer("relative_attention_max_distance", 128, c.relative_attention_num_buckets / 2 + 1, models::kMaxSeqLength);
  // T5 has no length limit of its own; qkv sizes its decoding caches by max_seq_length.
  c.max_seq_length = r.integer("n_positions", 512, 1, models::kMaxSeqLength);
}

}  // namespace

TransformerConfig hf_t5_config(const std::string& hf_dir, std::vector<std::string>* notes) {
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const HfConfigReader r(config_path, parse_hf_config(config_path));
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (expected \"t5\")");
  const std::string model_type = r.string("model_type", "");
  if (model_type != "t5" && model_type != "mt5") r.fail("model_type", "is \"" + model_type + "\", expected \"t5\"");
  r.require("is_encoder_decoder", true, true, "T5 is an encoder-decoder");
  TransformerConfig c;
  read_sizes(r, c);
  read_feed_forward(r, c);
  c.dropout = static_cast<float>(r.number("dropout_rate", 0.1, 0, 0.999));
  c.layer_norm = "rms";
  c.layer_norm_eps = static_cast<float>(r.number("layer_norm_epsilon", 1e-6, 1e-12, 1));
  c.norm = models::NormPosition::Pre;
  c.positions = "relative";
  c.scale_attention_scores = false;
  c.linear_bias = false;
  c.share_embeddings = true;
  c.tie_output_embedding = r.boolean("tie_word_embeddings", true);
  c.scale_decoder_output = c.tie_output_embedding;
  c.target_query_mask = false;
  const int64_t max_id = c.tgt_vocab_size - 1;
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 0, 0, max_id));
  c.eos_id = static_cast<int32_t>(r.integer("eos_token_id", 1, 0, max_id));
  c.bos_id = static_cast<int32_t>(r.integer("decoder_start_token_id", c.pad_id, 0, max_id));
  if (notes)
    notes->push_back("max_seq_length " + std::to_string(c.max_seq_length) +
                     " (T5's relative positions have no limit; qkv's decoding caches are sized by it)");
  validate_read_config(config_path, c);
  return c;
}

namespace {

// Reads the HF tensors into a model built from `c`: the names of hf_t5.h.
class T5WeightReader {
 public:
  T5WeightReader(HfWeights& w, const TransformerConfig& c) : w_(w), c_(c), d_(c.d_model) {}

  void linear(const std::string& hf, nn::Linear& l, int64_t out, int64_t in) {
    copy_into(w_.take(hf + ".weight", {out, in}, "nn.Linear (out, in)"), 0, l.weight.value());
  }
  void norm(const std::string& hf, nn::LayerNorm& n) {
    copy_into(w_.take(hf + ".weight", {d_}, "d_model"), 0, n.weight.value());
  }
  void attention(const std::string& hf, nn::MultiHeadAttention& a) {
    const int64_t inner = c_.attention_width();
    linear(hf + ".q", a.W_q, inner, d_);
    linear(hf + ".k", a.W_k, inner, d_);
    linear(hf + ".v", a.W_v, inner, d_);
    linear(hf + ".o", a.W_o, d_, inner);
  }
  void feed_forward(const std::string& hf, nn::PositionWiseFeedForward& f) {
    if (f.fc_up) {
      linear(hf + ".wi_0", f.fc1, c_.d_ff, d_);
      linear(hf + ".wi_1", *f.fc_up, c_.d_ff, d_);
    } else {
      linear(hf + ".wi", f.fc1, c_.d_ff, d_);
    }
    linear(hf + ".wo", f.fc2, d_, c_.d_ff);
  }
  void position_bias(const std::string& hf, nn::RelativePositionBias& b) {
    copy_into(w_.take(hf + ".weight", {c_.relative_attention_num_buckets, c_.num_heads},
                      "relative_attention_num_buckets x num_heads"),
              0, b.weight.value());
  }
  // A stored copy of the shared table must equal it.
  void same_if_stored(const std::string& name, const std::vector<float>& expected, const std::string& why) {
    if (!w_.has(name)) return;
    const std::vector<float> stored = w_.take(name, {c_.tgt_vocab_size, d_}, why);
    QKV_CHECK(stored.size() == expected.size() &&
                  std::memcmp(stored.data(), expected.data(), sizeof(float) * stored.size()) == 0,
              w_.path() << ": tensor '" << name << "' differs from the table it is tied to (" << why << ")");
  }

 private:
  HfWeights& w_;
  const TransformerConfig& c_;
  int64_t d_;
};

void read_t5_embeddings(HfWeights& w, T5WeightReader& reader, const TransformerConfig& c, models::Transformer& m) {
  const std::string name = w.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  const std::vector<float> table = w.take(name, {c.tgt_vocab_size, c.d_model}, "vocab_size x d_model");
  copy_into(table, 0, m.decoder_embedding.weight.value());  // the encoder's is the same tensor
  reader.same_if_stored("encoder.embed_tokens.weight", table, "T5's stacks share one table");
  reader.same_if_stored("decoder.embed_tokens.weight", table, "T5's stacks share one table");
  if (c.tie_output_embedding)
    reader.same_if_stored("lm_head.weight", table, "tie_word_embeddings");
  else
    copy_into(w.take("lm_head.weight", {c.tgt_vocab_size, c.d_model}, "vocab_size x d_model; tie_word_embeddings is false"),
              0, m.fc.weight.value());
}

void read_t5_layers(T5WeightReader& reader, const TransformerConfig& c, models::Transformer& m) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string e = "encoder.block." + std::to_string(l) + ".layer.", d = "decoder.block." + std::to_string(l) + ".layer.";
    models::EncoderLayer& enc = *m.encoder_layers[static_cast<size_t>(l)];
    reader.attention(e + "0.SelfAttention", enc.self_attn);
    reader.norm(e + "0.layer_norm", enc.norm1);
    reader.feed_forward(e + "1.DenseReluDense", enc.feed_forward);
    reader.norm(e + "1.layer_norm", enc.norm2);
    models::DecoderLayer& dec = *m.decoder_layers[static_cast<size_t>(l)];
    reader.attention(d + "0.SelfAttention", dec.self_attn);
    reader.norm(d + "0.layer_norm", dec.norm1);
    reader.attention(d + "1.EncDecAttention", dec.cross_attn);
    reader.norm(d + "1.layer_norm", dec.norm2);
    reader.feed_forward(d + "2.DenseReluDense", dec.feed_forward);
    reader.norm(d + "2.layer_norm", dec.norm3);
  }
  reader.position_bias("encoder.block.0.layer.0.SelfAttention.relative_attention_bias", *m.encoder_position_bias);
  reader.position_bias("decoder.block.0.layer.0.SelfAttention.relative_attention_bias", *m.decoder_position_bias);
  reader.norm("encoder.final_layer_norm", *m.encoder_norm);
  reader.norm("decoder.final_layer_norm", *m.decoder_norm);
}

}  // namespace

std::unique_ptr<models::Transformer> load_hf_t5(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_t5_config(hf_dir, &notes);
  std::unique_ptr<models::Transformer> model = transformer_to_read(c);
  HfWeights w(weights_path, {}, nullptr, "T5's model (T5ForConditionalGeneration)");
  T5WeightReader reader(w, c);
  read_t5_embeddings(w, reader, c, *model);
  read_t5_layers(reader, c, *model);
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "t5");
  return model;
}

namespace {
// spiece.model and, when present, tokenizer_config.json of `dir`.
std::vector<std::string> t5_tokenizer_files(const std::string& dir) {
  return existing_files(dir, {text::kT5Spm, text::kT5TokenizerConfig});
}
}  // namespace

HfConversion import_hf_t5(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_t5(hf_dir, &info);
  std::vector<std::string> tokenizer_files;
  if (text::T5Tokenizer::present(hf_dir)) {
    // Checked before anything is written: a tokenizer qkv cannot read, or one larger than the
    // model, would make a checkpoint that cannot translate text.
    const auto t = text::T5Tokenizer::load(hf_dir);
    QKV_CHECK(t->vocab_size() <= info.config.tgt_vocab_size,
              hf_dir << ": the tokenizer has " << t->vocab_size() << " ids, more than the model's "
                     << info.config.tgt_vocab_size);
    tokenizer_files = t5_tokenizer_files(hf_dir);
    info.tokenizer = true;
  } else {
    info.notes.push_back("no T5 tokenizer (spiece.model) in " + hf_dir +
                         ": the checkpoint translates token ids only (qkv translate --ids; a source line ends with EOS " +
                         std::to_string(info.config.eos_id) + ")");
  }
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  for (const std::string& name : tokenizer_files) staged.copy_from(name, hf_dir + "/" + name);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

bool is_t5_layout(const TransformerConfig& c) { return c.encoder_decoder() && c.positions == "relative"; }

namespace {
std::string t5_feed_forward_proj(const TransformerConfig& c) {
  const std::string act = c.activation == "gelu_tanh" ? "gelu_new" : c.activation;
  if (!c.gated_feed_forward) return act;
  return "gated-" + std::string(c.activation == "gelu_tanh" ? "gelu" : c.activation);
}
}  // namespace

std::string hf_t5_config_json(const TransformerConfig& c) {
  QKV_CHECK(is_t5_layout(c), "export --to hf: only an encoder-decoder model with positions \"relative\" exports as T5");
  const auto refuse = [](bool bad, const std::string& what) {
    QKV_CHECK(!bad, "export --to hf: " << what << ": transformers' T5 cannot express it");
  };
  refuse(c.norm != models::NormPosition::Pre, "post-LN (T5 is pre-LN)");
  refuse(c.layer_norm != "rms", "layer_norm \"" + c.layer_norm + "\" (T5 uses RMSNorm)");
  refuse(c.linear_bias, "linear_bias true (T5's linears have no biases)");
  refuse(c.scale_attention_scores, "scale_attention_scores true (T5 leaves scores unscaled)");
  refuse(c.scale_embeddings, "scale_embeddings true");
  refuse(!c.share_embeddings, "share_embeddings false (T5's stacks share one table)");
  refuse(c.tie_output_embedding != c.scale_decoder_output,
         "tie_output_embedding and scale_decoder_output differ (T5 scales the decoder output exactly when tied)");
  refuse(c.target_query_mask, "target_query_mask true (transformers' decoder masks future keys only)");
  refuse(c.embedding_norm, "embedding_norm true (T5 has no norm of its embeddings)");
  refuse(c.forced_bos_id >= 0, "forced_bos_id " + std::to_string(c.forced_bos_id) + " (T5 forces no first token)");
  refuse(c.gated_feed_forward && c.activation == "gelu", "a gated exact GELU (T5's gated-gelu is GELU's tanh form)");
  json j = json::object();
  j["architectures"] = {"T5ForConditionalGeneration"};
  j["model_type"] = "t5";
  j["d_ff"] = c.d_ff;
  j["d_kv"] = c.head_size();
  j["d_model"] = c.d_model;
  j["decoder_start_token_id"] = c.bos_id;
  j["dropout_rate"] = shortest(c.dropout);
  j["eos_token_id"] = c.eos_id;
  j["feed_forward_proj"] = t5_feed_forward_proj(c);
  j["is_encoder_decoder"] = true;
  j["layer_norm_epsilon"] = shortest(c.layer_norm_eps);
  j["n_positions"] = c.max_seq_length;
  j["num_decoder_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_layers"] = c.num_layers;
  j["pad_token_id"] = c.pad_id;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["tie_word_embeddings"] = c.tie_output_embedding;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.tgt_vocab_size;
  return j.dump(2) + "\n";
}

namespace {
// The tensors of a T5-layout model under T5ForConditionalGeneration's names (hf_t5.h).
io::StFile t5_tensors(const models::Transformer& m) {
  const TransformerConfig& c = m.config();
  io::StFile file = hf_safetensors_file();
  const auto add = [&](const std::string& name, const Tensor& t) { file.tensors.push_back(f32_tensor_of(name, t)); };
  const auto attention = [&](const std::string& hf, const nn::MultiHeadAttention& a) {
    add(hf + ".q.weight", a.W_q.weight.value());
    add(hf + ".k.weight", a.W_k.weight.value());
    add(hf + ".v.weight", a.W_v.weight.value());
    add(hf + ".o.weight", a.W_o.weight.value());
  };
  const auto feed_forward = [&](const std::string& hf, const nn::PositionWiseFeedForward& f) {
    add(hf + (f.fc_up ? ".wi_0.weight" : ".wi.weight"), f.fc1.weight.value());
    if (f.fc_up) add(hf + ".wi_1.weight", f.fc_up->weight.value());
    add(hf + ".wo.weight", f.fc2.weight.value());
  };
  add("shared.weight", m.decoder_embedding.weight.value());
  if (!c.tie_output_embedding) add("lm_head.weight", m.fc.weight.value());
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string e = "encoder.block." + std::to_string(l) + ".layer.", d = "decoder.block." + std::to_string(l) + ".layer.";
    const models::EncoderLayer& enc = *m.encoder_layers[static_cast<size_t>(l)];
    attention(e + "0.SelfAttention", enc.self_attn);
    add(e + "0.layer_norm.weight", enc.norm1.weight.value());
    feed_forward(e + "1.DenseReluDense", enc.feed_forward);
    add(e + "1.layer_norm.weight", enc.norm2.weight.value());
    const models::DecoderLayer& dec = *m.decoder_layers[static_cast<size_t>(l)];
    attention(d + "0.SelfAttention", dec.self_attn);
    add(d + "0.layer_norm.weight", dec.norm1.weight.value());
    attention(d + "1.EncDecAttention", dec.cross_attn);
    add(d + "1.layer_norm.weight", dec.norm2.weight.value());
    feed_forward(d + "2.DenseReluDense", dec.feed_forward);
    add(d + "2.layer_norm.weight", dec.norm3.weight.value());
  }
  add("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", m.encoder_position_bias->weight.value());
  add("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", m.decoder_position_bias->weight.value());
  add("encoder.final_layer_norm.weight", m.encoder_norm->weight.value());
  add("decoder.final_layer_norm.weight", m.decoder_norm->weight.value());
  return file;
}
}  // namespace

HfConversion export_hf_t5(const std::string& checkpoint_dir, const std::string& out_dir) {
  Seq2SeqExport e = start_seq2seq_export(checkpoint_dir, hf_t5_config_json);
  HfExportFiles& files = e.files;
  const std::unique_ptr<models::Transformer>& model = e.model;
  const TransformerConfig& c = model->config();
  json generation = json::object();
  generation["decoder_start_token_id"] = c.bos_id;
  generation["eos_token_id"] = c.eos_id;
  generation["pad_token_id"] = c.pad_id;
  files.generation_config_json = generation.dump(2) + "\n";
  files.weights = t5_tensors(*model);
  if (text::T5Tokenizer::present(checkpoint_dir)) files.tokenizer_files = t5_tokenizer_files(checkpoint_dir);
  return write_hf_export(checkpoint_dir, out_dir, *model, "t5", "T5ForConditionalGeneration", files);
}

}  // namespace qkv::interop
