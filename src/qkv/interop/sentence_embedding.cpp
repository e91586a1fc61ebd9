#include "qkv/interop/sentence_embedding.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/interop/hf_common.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
json read_json(const std::string& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// The one pooling mode 1_Pooling/config.json turns on.
std::string pooling_mode(const std::string& path) {
  const json j = read_json(path);
  QKV_CHECK(j.is_object(), path << ": expected a JSON object");
  const std::vector<std::pair<const char*, const char*>> supported = {{"pooling_mode_mean_tokens", "mean"},
                                                                       {"pooling_mode_cls_token", "cls"},
                                                                       {"pooling_mode_max_tokens", "max"},
                                                                       {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"}};
  for (const char* unsupported : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
    QKV_CHECK(!(j.contains(unsupported) && j[unsupported] == true),
              path << ": field \"" << unsupported << "\" is true: not supported (qkv pools by mean, cls, max or mean_sqrt_len)");
  QKV_CHECK(!(j.contains("include_prompt") && j["include_prompt"] == false),
            path << ": field \"include_prompt\" is false: not supported (qkv pools over every token)");
  std::string mode;
  for (const auto& [key, name] : supported) {
    if (!(j.contains(key) && j[key] == true)) continue;
    QKV_CHECK(mode.empty(), path << ": pooling modes \"" << mode << "\" and \"" << name
                                 << "\" are both on; qkv computes one (concatenated modes are not supported)");
    mode = name;
  }
  QKV_CHECK(!mode.empty(), path << ": no pooling mode is on");
  return mode;
}
}  // namespace

std::optional<SentenceEmbeddingConfig> read_sentence_transformers_config(const std::string& hf_dir) {
  std::error_code ec;
  const std::string modules_path = hf_dir + "/modules.json";
  if (!fs::exists(modules_path, ec)) return std::nullopt;
  const json modules = read_json(modules_path);
  QKV_CHECK(modules.is_array(), modules_path << ": expected a JSON array of modules");
  SentenceEmbeddingConfig c;
  c.normalize = false;
  bool pooled = false;
  for (const json& m : modules) {
    QKV_CHECK(m.is_object() && m.contains("type") && m["type"].is_string(),
              modules_path << ": every module needs a \"type\" string");
    const std::string type = m["type"].get<std::string>();
    const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Pooling") {
      c.pooling = pooling_mode(hf_dir + "/" + path + "/config.json");
      pooled = true;
    } else if (type == "sentence_transformers.models.Normalize") {
      c.normalize = true;  // it has no settings (and the model packages often ship no folder for it)
    } else {
      throw Error(modules_path + ": module \"" + type +
                  "\" is not supported (qkv reads Transformer, Pooling and Normalize)");
    }
  }
  QKV_CHECK(pooled, modules_path << ": no sentence_transformers.models.Pooling module");
  const std::string st_config = hf_dir + "/sentence_bert_config.json";
  if (fs::exists(st_config, ec)) {
    const json j = read_json(st_config);
    QKV_CHECK(j.is_object(), st_config << ": expected a JSON object");
    if (j.contains("max_seq_length") && !j["max_seq_length"].is_null()) {
      QKV_CHECK(j["max_seq_length"].is_number_integer() && j["max_seq_length"].get<int64_t>() >= 2,
                st_config << ": field \"max_seq_length\" must be an integer >= 2");
      c.max_seq_length = j["max_seq_length"].get<int64_t>();
    }
  }
  return c;
}

}  // namespace qkv::interop
