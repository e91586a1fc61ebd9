#include "qkv/models/config.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"

namespace qkv::models {

using nlohmann::json;

float TransformerConfig::mask_fill_value() const {
  return mask_fill == "-inf" ? -std::numeric_limits<float>::infinity() : -1e9f;
}

void TransformerConfig::validate() const {
  auto positive = [](const char* name, int64_t v) { QKV_CHECK(v > 0, "config: " << name << " must be positive, got " << v); };
  positive("src_vocab_size", src_vocab_size);
  positive("tgt_vocab_size", tgt_vocab_size);
  positive("d_model", d_model);
  positive("num_heads", num_heads);
  positive("num_layers", num_layers);
  positive("d_ff", d_ff);
  positive("max_seq_length", max_seq_length);
  QKV_CHECK(d_model % num_heads == 0, "config: d_model " << d_model << " must be divisible by num_heads " << num_heads);
  QKV_CHECK(dropout >= 0.f && dropout < 1.f, "config: dropout must be in [0, 1), got " << dropout);
  QKV_CHECK(attention_dropout >= 0.f && attention_dropout < 1.f,
            "config: attention_dropout must be in [0, 1), got " << attention_dropout);
  QKV_CHECK(pad_id >= 0 && pad_id < src_vocab_size && pad_id < tgt_vocab_size,
            "config: pad_id " << pad_id << " must be a valid id of both vocabularies");
  QKV_CHECK(bos_id >= 0 && bos_id < tgt_vocab_size && eos_id >= 0 && eos_id < tgt_vocab_size,
            "config: bos_id " << bos_id << " and eos_id " << eos_id << " must be ids of the target vocabulary");
  QKV_CHECK(activation == "relu" || activation == "gelu", "config: activation must be \"relu\" or \"gelu\", got \"" << activation << "\"");
  QKV_CHECK(mask_fill == "-1e9" || mask_fill == "-inf", "config: mask_fill must be \"-1e9\" or \"-inf\", got \"" << mask_fill << "\"");
  QKV_CHECK(layer_norm_eps > 0.f, "config: layer_norm_eps must be positive, got " << layer_norm_eps);
}

std::string config_to_json(const TransformerConfig& c) {
  json j = {{"src_vocab_size", c.src_vocab_size},
            {"tgt_vocab_size", c.tgt_vocab_size},
            {"d_model", c.d_model},
            {"num_heads", c.num_heads},
            {"num_layers", c.num_layers},
            {"d_ff", c.d_ff},
            {"max_seq_length", c.max_seq_length},
            {"dropout", c.dropout},
            {"pad_id", c.pad_id},
            {"bos_id", c.bos_id},
            {"eos_id", c.eos_id},
            {"norm", c.norm == NormPosition::Post ? "post" : "pre"},
            {"activation", c.activation},
            {"layer_norm_eps", c.layer_norm_eps},
            {"scale_embeddings", c.scale_embeddings},
            {"tie_output_embedding", c.tie_output_embedding},
            {"mask_fill", c.mask_fill},
            {"attention_dropout", c.attention_dropout}};
  return j.dump(2) + "\n";
}

namespace {
template <class T>
void read_field(const json& j, const char* key, T& out, const std::string& src) {
  if (!j.contains(key)) return;  // absent: keep the seed's default
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(src + ": field \"" + key + "\" has the wrong type (" + j.at(key).dump() + ")");
  }
}
}  // namespace

TransformerConfig config_from_json(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(src + ": not valid JSON: " + e.what());
  }
  QKV_CHECK(j.is_object(), src << ": expected a JSON object");
  static const std::set<std::string> known = {
      "src_vocab_size", "tgt_vocab_size", "d_model", "bos_id", "eos_id",        "num_heads",        "num_layers",
      "d_ff",           "max_seq_length", "dropout",        "pad_id",           "norm",
      "activation",     "layer_norm_eps", "scale_embeddings", "tie_output_embedding", "mask_fill",
      "attention_dropout"};
  for (auto it = j.begin(); it != j.end(); ++it)
    QKV_CHECK(known.count(it.key()), src << ": unknown field \"" << it.key() << "\"");
  TransformerConfig c;
  read_field(j, "src_vocab_size", c.src_vocab_size, src);
  read_field(j, "tgt_vocab_size", c.tgt_vocab_size, src);
  read_field(j, "d_model", c.d_model, src);
  read_field(j, "num_heads", c.num_heads, src);
  read_field(j, "num_layers", c.num_layers, src);
  read_field(j, "d_ff", c.d_ff, src);
  read_field(j, "max_seq_length", c.max_seq_length, src);
  read_field(j, "dropout", c.dropout, src);
  read_field(j, "pad_id", c.pad_id, src);
  read_field(j, "bos_id", c.bos_id, src);
  read_field(j, "eos_id", c.eos_id, src);
  std::string norm = "post";
  read_field(j, "norm", norm, src);
  QKV_CHECK(norm == "post" || norm == "pre", src << ": field \"norm\" must be \"post\" or \"pre\", got \"" << norm << "\"");
  c.norm = norm == "post" ? NormPosition::Post : NormPosition::Pre;
  read_field(j, "activation", c.activation, src);
  read_field(j, "layer_norm_eps", c.layer_norm_eps, src);
  read_field(j, "scale_embeddings", c.scale_embeddings, src);
  read_field(j, "tie_output_embedding", c.tie_output_embedding, src);
  read_field(j, "mask_fill", c.mask_fill, src);
  read_field(j, "attention_dropout", c.attention_dropout, src);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(src + ": " + e.what());
  }
  return c;
}

TransformerConfig load_config(const std::string& path) {
  std::ifstream in(path);
  QKV_CHECK(in, path << ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return config_from_json(ss.str(), path);
}

void save_config(const std::string& path, const TransformerConfig& config) {
  io::write_file_atomic(path, config_to_json(config));
}

}  // namespace qkv::models
