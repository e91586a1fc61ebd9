#include "qkv/interop/hf_marian.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/io/checkpoint_dir.h"
#include "qkv/models/checkpoint.h"
#include "qkv/nn/layers.h"
#include "qkv/text/marian_tokenizer.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::TransformerConfig;

namespace {

// One value for both stacks: qkv's config has one, Marian's two (equal in every OPUS-MT model).
int64_t same_in_both_stacks(const HfConfigReader& r, const char* encoder_key, const char* decoder_key, int64_t fallback,
                            int64_t max) {
  const int64_t e = r.integer(encoder_key, fallback, 1, max), d = r.integer(decoder_key, e, 1, max);
  if (e != d)
    r.fail(decoder_key, "is " + std::to_string(d) + " but " + encoder_key + " is " + std::to_string(e) +
                            ": not supported (qkv's encoder and decoder have the same size)");
  return e;
}

std::string activation_of(const HfConfigReader& r) {
  const std::string act = r.string("activation_function", "gelu");
  if (act == "swish" || act == "silu") return "silu";
  if (act == "gelu") return "gelu";
  if (act == "relu") return "relu";
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  r.fail("activation_function", "is \"" + act + "\": not supported (qkv has \"swish\"/\"silu\", \"gelu\", \"relu\", "
                                "\"gelu_new\")");
}

// generation_config.json's bad_words_ids (or config.json's, in files written before the split):
// only the pad id is accepted, which qkv's search never chooses anyway.
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
           (words[0].get<int64_t>() == c.pad_id || words[0].get<int64_t>() == c.bos_id);
  });
  QKV_CHECK(only_pad, where << ": field \"bad_words_ids\" is " << bad.dump()
                            << ": not supported (qkv's search never chooses the pad id " << c.pad_id
                            << "; it has no other banned words)");
  if (notes) notes->push_back("bad_words_ids " + bad.dump() + ": the pad id, which qkv's search never chooses");
}

}  // namespace

TransformerConfig hf_marian_config(const std::string& hf_dir, std::vector<std::string>* notes) {
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const json j = parse_hf_config(config_path);
  const HfConfigReader r(config_path, j);
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (expected \"marian\")");
  const std::string model_type = r.string("model_type", "");
  if (model_type != "marian") r.fail("model_type", "is \"" + model_type + "\", expected \"marian\"");
  for (const char* key : {"normalize_before", "add_final_layer_norm", "normalize_embedding", "layernorm_embedding"})
    r.require(key, false, false, "Marian's blocks are post-LN without an embedding norm; BART-style layouts are not "
                                 "imported as Marian");
  r.require("is_encoder_decoder", true, true, "a Marian model is an encoder-decoder");

  TransformerConfig c;  // the seed's defaults, then Marian's choices
  c.src_vocab_size = r.integer("vocab_size", 58101, 1, models::kMaxVocabSize);
  c.share_embeddings = r.boolean("share_encoder_decoder_embeddings", true);
  c.tgt_vocab_size = r.integer("decoder_vocab_size", c.src_vocab_size, 1, models::kMaxVocabSize);
  if (c.share_embeddings && c.tgt_vocab_size != c.src_vocab_size)
    r.fail("decoder_vocab_size", "is " + std::to_string(c.tgt_vocab_size) + " but vocab_size is " +
                                     std::to_string(c.src_vocab_size) + " and share_encoder_decoder_embeddings is true");
  c.d_model = r.integer("d_model", 512, 1, models::kMaxWidth);
  c.num_layers = same_in_both_stacks(r, "encoder_layers", "decoder_layers", 6, models::kMaxLayers);
  c.num_heads = same_in_both_stacks(r, "encoder_attention_heads", "decoder_attention_heads", 8, models::kMaxWidth);
  if (c.d_model % c.num_heads != 0)
    r.fail("encoder_attention_heads", "is " + std::to_string(c.num_heads) + ", which does not divide d_model " +
                                          std::to_string(c.d_model));
  c.d_ff = same_in_both_stacks(r, "encoder_ffn_dim", "decoder_ffn_dim", 2048, models::kMaxWidth);
  c.max_seq_length = r.integer("max_position_embeddings", 512, 1, models::kMaxSeqLength);
  c.activation = activation_of(r);
  c.dropout = static_cast<float>(r.number("dropout", 0.1, 0, 0.999));
  c.attention_dropout = static_cast<float>(r.number("attention_dropout", 0, 0, 0.999));
  c.ffn_dropout = static_cast<float>(r.number("activation_dropout", 0, 0, 0.999));
  c.scale_embeddings = r.boolean("scale_embedding", false);
  c.tie_output_embedding = r.boolean("tie_word_embeddings", true);
  c.norm = models::NormPosition::Post;
  c.layer_norm_eps = 1e-5f;  // nn.LayerNorm's default, which MarianEncoderLayer uses
  c.positions = "sinusoidal_halves";
  c.target_query_mask = false;
  c.mask_fill = "-1e9";  // transformers fills with the dtype's minimum: masked probabilities are 0 either way
  const int64_t max_id = std::min(c.src_vocab_size, c.tgt_vocab_size) - 1;
  for (const char* key : {"pad_token_id", "eos_token_id", "decoder_start_token_id"})
    QKV_CHECK(r.has(key), config_path << ": field \"" << key << "\" is missing (qkv takes the special ids from the config)");
  c.pad_id = static_cast<int32_t>(r.integer("pad_token_id", 0, 0, max_id));
  c.eos_id = static_cast<int32_t>(r.integer("eos_token_id", 0, 0, c.tgt_vocab_size - 1));
  c.bos_id = static_cast<int32_t>(r.integer("decoder_start_token_id", 0, 0, c.tgt_vocab_size - 1));
  check_bad_words(hf_dir, r, c, notes);
  if (notes && c.ffn_dropout > 0)
    notes->push_back("activation_dropout " + std::to_string(c.ffn_dropout) + " is ffn_dropout (training only)");
  validate_read_config(config_path, c);
  return c;
}

namespace {

// Reads the HF tensors into a model built from `c`: the names of hf_marian.h.
class MarianWeightReader {
 public:
  MarianWeightReader(HfWeights& w, const TransformerConfig& c) : w_(w), c_(c), d_(c.d_model) {}

  void linear(const std::string& hf, nn::Linear& l, int64_t out, int64_t in) {
    copy_into(w_.take(hf + ".weight", {out, in}, "nn.Linear (out, in)"), 0, l.weight.value());
    copy_into(w_.take(hf + ".bias", {out}, "out features"), 0, l.bias.value());
  }
  void norm(const std::string& hf, nn::LayerNorm& n) {
    copy_into(w_.take(hf + ".weight", {d_}, "d_model"), 0, n.weight.value());
    copy_into(w_.take(hf + ".bias", {d_}, "d_model"), 0, n.bias.value());
  }
  void attention(const std::string& hf, nn::MultiHeadAttention& a) {
    linear(hf + ".q_proj", a.W_q, d_, d_);
    linear(hf + ".k_proj", a.W_k, d_, d_);
    linear(hf + ".v_proj", a.W_v, d_, d_);
    linear(hf + ".out_proj", a.W_o, d_, d_);
  }
  void feed_forward(const std::string& hf, nn::PositionWiseFeedForward& f) {
    linear(hf + "fc1", f.fc1, c_.d_ff, d_);
    linear(hf + "fc2", f.fc2, d_, c_.d_ff);
  }
  // A tensor that must equal `expected` when the file stores it (tied tables saved twice).
  void same_if_stored(const std::string& name, const std::vector<float>& expected, int64_t rows, const std::string& why) {
    if (!w_.has(name)) return;
    const std::vector<float> stored = w_.take(name, {rows, d_}, why);
    QKV_CHECK(stored.size() == expected.size() &&
                  std::memcmp(stored.data(), expected.data(), sizeof(float) * stored.size()) == 0,
              w_.path() << ": tensor '" << name << "' differs from the table it is tied to (" << why << ")");
  }
  // A stored sinusoidal table must be the one qkv computes (a different one would be a layout qkv
  // does not build).
  void check_positions(const std::string& name, const Tensor& ours) {
    if (!w_.has(name)) return;
    const std::vector<float> stored = w_.take(name, {ours.size(0), ours.size(1)}, "max_position_embeddings x d_model");
    const std::vector<float> mine = ours.contiguous().to_vector();
    for (size_t i = 0; i < stored.size(); ++i)
      QKV_CHECK(std::fabs(stored[i] - mine[i]) <= 1e-5f,
                w_.path() << ": tensor '" << name << "' is not Marian's sinusoidal table (element " << i << " is "
                          << stored[i] << ", expected " << mine[i] << ")");
  }

 private:
  HfWeights& w_;
  const TransformerConfig& c_;
  int64_t d_;
};

void read_embeddings(HfWeights& w, MarianWeightReader& reader, const TransformerConfig& c, models::Transformer& m) {
  const int64_t D = c.d_model, S = c.src_vocab_size, T = c.tgt_vocab_size;
  std::vector<float> decoder_table;
  if (c.share_embeddings) {
    const bool shared = w.has("shared.weight");
    const std::string name = shared ? "shared.weight" : "encoder.embed_tokens.weight";
    decoder_table = w.take(name, {S, D}, "vocab_size x d_model");
    copy_into(decoder_table, 0, m.decoder_embedding.weight.value());  // the encoder's is the same tensor
    reader.same_if_stored("encoder.embed_tokens.weight", decoder_table, S, "share_encoder_decoder_embeddings");
    reader.same_if_stored("decoder.embed_tokens.weight", decoder_table, S, "share_encoder_decoder_embeddings");
  } else {
    copy_into(w.take("encoder.embed_tokens.weight", {S, D}, "vocab_size x d_model"), 0, m.encoder_embedding.weight.value());
    decoder_table = w.take("decoder.embed_tokens.weight", {T, D}, "decoder_vocab_size x d_model");
    copy_into(decoder_table, 0, m.decoder_embedding.weight.value());
    if (w.has("shared.weight")) w.skip("shared.weight");  // transformers keeps an unused table there
  }
  if (c.tie_output_embedding)
    reader.same_if_stored("lm_head.weight", decoder_table, T, "tie_word_embeddings");
  else
    copy_into(w.take("lm_head.weight", {T, D}, "decoder_vocab_size x d_model; tie_word_embeddings is false"), 0,
              m.fc.weight.value());
  Tensor& bias = m.fc.bias.value();
  if (w.has("final_logits_bias")) copy_into(w.take("final_logits_bias", {1, T}, "1 x decoder_vocab_size"), 0, bias);
  else bias.zero();
}

}  // namespace

std::unique_ptr<models::Transformer> load_hf_marian(const std::string& hf_dir, HfConversion* info) {
  const std::string weights_path = hf_weights_path(hf_dir);
  std::vector<std::string> notes;
  const TransformerConfig c = hf_marian_config(hf_dir, &notes);
  std::unique_ptr<models::Transformer> model;
  {
    const nn::SkipRandomInitGuard no_init;  // every parameter is read below
    model = std::make_unique<models::Transformer>(c, 0);
  }
  model->eval();
  HfWeights w(weights_path, {"model."}, nullptr, "Marian's translation model (MarianMTModel)");
  MarianWeightReader reader(w, c);
  read_embeddings(w, reader, c, *model);
  reader.check_positions("encoder.embed_positions.weight", model->positional_encoding.pe);
  reader.check_positions("decoder.embed_positions.weight", model->positional_encoding.pe);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string e = "encoder.layers." + std::to_string(l) + ".", d = "decoder.layers." + std::to_string(l) + ".";
    models::EncoderLayer& enc = *model->encoder_layers[static_cast<size_t>(l)];
    reader.attention(e + "self_attn", enc.self_attn);
    reader.norm(e + "self_attn_layer_norm", enc.norm1);
    reader.feed_forward(e, enc.feed_forward);
    reader.norm(e + "final_layer_norm", enc.norm2);
    models::DecoderLayer& dec = *model->decoder_layers[static_cast<size_t>(l)];
    reader.attention(d + "self_attn", dec.self_attn);
    reader.norm(d + "self_attn_layer_norm", dec.norm1);
    reader.attention(d + "encoder_attn", dec.cross_attn);
    reader.norm(d + "encoder_attn_layer_norm", dec.norm2);
    reader.feed_forward(d, dec.feed_forward);
    reader.norm(d + "final_layer_norm", dec.norm3);
  }
  w.expect_all_taken();
  describe_import(info, c, w, *model, notes, "marian");
  return model;
}

HfConversion import_hf_marian(const std::string& hf_dir, const std::string& out_dir) {
  HfConversion info;
  auto model = load_hf_marian(hf_dir, &info);
  std::vector<std::string> tokenizer_files;
  if (text::MarianTokenizer::present(hf_dir)) {
    // Checked before anything is written: a tokenizer qkv cannot read, or one larger than the
    // model, would make a checkpoint that cannot translate text.
    for (const bool target : {false, true}) {
      const auto t = text::MarianTokenizer::load(hf_dir, target);
      const int64_t rows = target ? info.config.tgt_vocab_size : info.config.src_vocab_size;
      QKV_CHECK(t->vocab_size() <= rows, hf_dir << ": the " << (target ? "target" : "source") << " vocabulary has "
                                                << t->vocab_size() << " ids, more than the model's " << rows);
    }
    for (const char* name : {text::kMarianSourceSpm, text::kMarianTargetSpm, text::kMarianVocab, text::kMarianTargetVocab,
                             text::kTokenizerConfig}) {
      std::error_code ec;
      if (fs::exists(hf_dir + "/" + name, ec)) tokenizer_files.push_back(name);
    }
    info.tokenizer = true;
  } else {
    info.notes.push_back("no Marian tokenizer (source.spm, target.spm, vocab.json) in " + hf_dir +
                         ": the checkpoint translates token ids only (qkv translate --ids)");
  }
  io::StagedDirectory staged(out_dir);
  models::write_model_files(staged, *model);
  for (const std::string& name : tokenizer_files) staged.copy_from(name, hf_dir + "/" + name);
  staged.commit();
  return info;
}

// ----------------------------------------------------------------------------- export (qkv -> HF) ---

namespace {
std::string marian_activation(const std::string& qkv_name) {
  if (qkv_name == "silu") return "swish";
  if (qkv_name == "gelu_tanh") return "gelu_new";
  return qkv_name;  // relu, gelu
}
}  // namespace

std::string hf_marian_config_json(const TransformerConfig& c) {
  QKV_CHECK(c.encoder_decoder(), "export --to hf: this is an " << c.architecture
                                                                 << " model; encoder-decoder models export as Marian");
  const auto refuse = [](bool bad, const std::string& what) {
    QKV_CHECK(!bad, "export --to hf: " << what << ": transformers' Marian cannot express it");
  };
  refuse(c.norm != models::NormPosition::Post, "pre-LN (Marian is post-LN)");
  refuse(c.positions != "sinusoidal_halves", "positions \"" + c.positions +
                                                 "\" (Marian's table is \"sinusoidal_halves\": sines, then cosines)");
  refuse(c.layer_norm != "standard", "layer_norm \"" + c.layer_norm + "\" (Marian uses nn.LayerNorm)");
  refuse(c.layer_norm_eps != 1e-5f, "layer_norm_eps " + std::to_string(c.layer_norm_eps) + " (Marian's is 1e-5)");
  refuse(c.target_query_mask, "target_query_mask true (transformers' decoder masks future keys only)");
  refuse(c.share_embeddings && c.src_vocab_size != c.tgt_vocab_size, "share_embeddings with two vocabulary sizes");
  refuse(c.head_dim > 0, "head_dim " + std::to_string(c.head_dim) + " (Marian's heads split d_model)");
  json j = json::object();
  j["architectures"] = {"MarianMTModel"};
  j["model_type"] = "marian";
  j["activation_dropout"] = shortest(c.ffn_dropout);
  j["activation_function"] = marian_activation(c.activation);
  j["attention_dropout"] = shortest(c.attention_dropout);
  j["d_model"] = c.d_model;
  j["decoder_attention_heads"] = c.num_heads;
  j["decoder_ffn_dim"] = c.d_ff;
  j["decoder_layers"] = c.num_layers;
  j["decoder_start_token_id"] = c.bos_id;
  j["decoder_vocab_size"] = c.tgt_vocab_size;
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
  j["share_encoder_decoder_embeddings"] = c.share_embeddings;
  j["tie_word_embeddings"] = c.tie_output_embedding;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.src_vocab_size;
  return j.dump(2) + "\n";
}

std::string hf_marian_generation_config_json(const TransformerConfig& c) {
  json j = json::object();
  j["bad_words_ids"] = json::array({json::array({c.pad_id})});
  j["decoder_start_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  j["forced_eos_token_id"] = c.eos_id;
  j["pad_token_id"] = c.pad_id;
  return j.dump(2) + "\n";
}

HfConversion export_hf_marian(const std::string& checkpoint_dir, const std::string& out_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  // The config first: an unexportable model is refused before its weights are read.
  const TransformerConfig config = models::load_config(checkpoint_dir + "/config.json");
  const std::string config_json = hf_marian_config_json(config);
  const std::unique_ptr<models::Transformer> model = models::load_seq2seq(checkpoint_dir);
  const TransformerConfig& c = model->config();
  io::StFile file = hf_safetensors_file();
  const auto add = [&](const std::string& name, const Tensor& t) { file.tensors.push_back(f32_tensor_of(name, t)); };
  const auto linear = [&](const std::string& hf, const nn::Linear& l) {
    add(hf + ".weight", l.weight.value());
    add(hf + ".bias", l.bias.value());
  };
  const auto norm = [&](const std::string& hf, const nn::LayerNorm& n) {
    add(hf + ".weight", n.weight.value());
    add(hf + ".bias", n.bias.value());
  };
  const auto attention = [&](const std::string& hf, const nn::MultiHeadAttention& a) {
    linear(hf + ".q_proj", a.W_q);
    linear(hf + ".k_proj", a.W_k);
    linear(hf + ".v_proj", a.W_v);
    linear(hf + ".out_proj", a.W_o);
  };
  if (c.share_embeddings) {
    add("model.shared.weight", model->decoder_embedding.weight.value());
  } else {
    add("model.encoder.embed_tokens.weight", model->encoder_embedding.weight.value());
    add("model.decoder.embed_tokens.weight", model->decoder_embedding.weight.value());
  }
  if (!c.tie_output_embedding) add("lm_head.weight", model->fc.weight.value());
  add("final_logits_bias", model->fc.bias.value().reshape(Dims{1, c.tgt_vocab_size}));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string e = "model.encoder.layers." + std::to_string(l) + ".";
    const std::string d = "model.decoder.layers." + std::to_string(l) + ".";
    const models::EncoderLayer& enc = *model->encoder_layers[static_cast<size_t>(l)];
    attention(e + "self_attn", enc.self_attn);
    norm(e + "self_attn_layer_norm", enc.norm1);
    linear(e + "fc1", enc.feed_forward.fc1);
    linear(e + "fc2", enc.feed_forward.fc2);
    norm(e + "final_layer_norm", enc.norm2);
    const models::DecoderLayer& dec = *model->decoder_layers[static_cast<size_t>(l)];
    attention(d + "self_attn", dec.self_attn);
    norm(d + "self_attn_layer_norm", dec.norm1);
    attention(d + "encoder_attn", dec.cross_attn);
    norm(d + "encoder_attn_layer_norm", dec.norm2);
    linear(d + "fc1", dec.feed_forward.fc1);
    linear(d + "fc2", dec.feed_forward.fc2);
    norm(d + "final_layer_norm", dec.norm3);
  }

  HfConversion info;
  info.config = c;
  info.weights_dtype = "F32";
  info.parameters = count_parameters(*model);
  info.model_type = "marian";
  std::vector<std::string> tokenizer_files;
  std::error_code ec;
  if (text::MarianTokenizer::present(checkpoint_dir)) {
    for (const char* name : {text::kMarianSourceSpm, text::kMarianTargetSpm, text::kMarianVocab, text::kMarianTargetVocab,
                             text::kTokenizerConfig})
      if (fs::exists(checkpoint_dir + "/" + name, ec)) tokenizer_files.push_back(name);
    info.tokenizer = true;
  } else if (fs::exists(checkpoint_dir + "/" + models::kSourceSpmFile, ec)) {
    info.notes.push_back(std::string(models::kSourceSpmFile) + " and " + models::kTargetSpmFile +
                         " not exported: MarianTokenizer needs a vocab.json beside its SentencePiece models");
  }
  io::StagedDirectory staged(out_dir);
  io::write_safetensors(staged.path(kHfWeightsFile), file);
  staged.write(kHfConfigFile, config_json);
  staged.write("generation_config.json", hf_marian_generation_config_json(c));
  for (const std::string& name : tokenizer_files) staged.copy_from(name, checkpoint_dir + "/" + name);
  staged.commit();
  return info;
}

}  // namespace qkv::interop
