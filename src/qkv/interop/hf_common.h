// What every Hugging Face conversion shares: reading config.json fields with errors that name
// them, taking the tensors of model.safetensors one by one (each exactly once, shapes checked,
// half precision widened), and the checks of a model directory. The families' mappings live in
// hf_gpt2.*, hf_bert.*, hf_marian.*, hf_t5.* and hf_bart.* (Marian and BART share hf_seq2seq.*);
// hf_import.h chooses one by config.json's model_type.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/model.h"

namespace qkv::interop {

inline constexpr const char* kTokenizerJsonFile = "tokenizer.json";
inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";

// What a conversion did, for the CLI to report (the library never prints).
struct HfConversion {
  models::TransformerConfig config;
  std::string model_type;          // config.json's model_type ("gpt2", "bert")
  std::string weights_dtype;       // import: dtype of the source weights ("F32", "F16", "BF16", "mixed")
  bool tokenizer = false;          // tokenizer files copied
  std::string hf_class;            // export: the transformers class that loads the directory
  std::vector<std::string> tokenizer_files;  // export: the tokenizer files written
  int64_t parameters = 0;          // distinct parameter elements
  std::vector<std::string> notes;  // choices worth telling the user (e.g. embd_pdrop dropped)
};

std::string read_text(const std::string& path);
// A JSON file whose top level must be an object; errors name the file (`what` says what it should be).
nlohmann::json parse_json_object(const std::string& path, const std::string& what);
// config.json parsed as a JSON object; errors name the file.
nlohmann::json parse_hf_config(const std::string& config_path);
// DIR/model.safetensors after checking that DIR is a directory with config.json and an unsharded
// safetensors file (errors say what is missing and why).
std::string hf_weights_path(const std::string& hf_dir);

class HfConfigReader {
 public:
  HfConfigReader(std::string path, nlohmann::json j) : path_(std::move(path)), j_(std::move(j)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw Error(path_ + ": field \"" + key + "\" " + problem);
  }

  // An integer in [lo, hi]; JSON integers, or floats with an integral value (32.0).
  int64_t integer(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    int64_t out = 0;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(key, "is " + v.dump() + ", expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      out = v.get<int64_t>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9e18) {
      out = static_cast<int64_t>(v.get<double>());
    } else {
      fail(key, "is " + v.dump() + ", expected an integer");
    }
    if (out < lo || out > hi)
      fail(key, "is " + v.dump() + ", expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return out;
  }

  double number(const char* key, double fallback, double lo, double hi) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(key, "is " + v.dump() + ", expected a number");
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi))
      fail(key, "is " + v.dump() + ", expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return d;
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, "is " + v.dump() + ", expected true or false");
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) fail(key, "is " + v.dump() + ", expected a string");
    return v.get<std::string>();
  }

  // A boolean option that qkv computes only with one value.
  void require(const char* key, bool fallback, bool supported, const std::string& why) const {
    if (boolean(key, fallback) != supported)
      fail(key, std::string("is ") + (supported ? "false" : "true") + ": not supported (" + why + ")");
  }

  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return j_; }

 private:
  std::string path_;
  nlohmann::json j_;
};

// The tensors of model.safetensors, each taken once. Names are looked up without the first of
// `prefixes` they start with ("transformer." of GPT2LMHeadModel, "bert." of BertForMaskedLM), so
// a bare model and a model with a head read alike; what is left at the end and not `ignorable` is
// refused by name (`what` names the model in that message).
class HfWeights {
 public:
  HfWeights(const std::string& path, const std::vector<std::string>& prefixes,
            std::function<bool(const std::string&)> ignorable, std::string what);
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  // The float32 values of tensor `name` (expected shape `shape`; `why` explains it in the error).
  std::vector<float> take(const std::string& name, const std::vector<int64_t>& shape, const std::string& why);
  // Marks a tensor that is read but not a parameter (a buffer) as used.
  void skip(const std::string& name) { taken_.insert(name); }
  void expect_all_taken() const;
  std::string dtype_summary() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  io::StFile file_;
  std::map<std::string, io::StTensor*> by_name_;
  std::set<std::string> taken_;
  std::set<std::string> dtypes_;
  std::function<bool(const std::string&)> ignorable_;
  std::string what_;
};

// c.validate(), its error prefixed by the config file it was read from.
void validate_read_config(const std::string& config_path, const models::TransformerConfig& c);

// What an import did, for `info` (may be null): the config, the source weights' dtypes, the
// parameter count, the notes and the model type.
void describe_import(HfConversion* info, const models::TransformerConfig& config, const HfWeights& weights,
                     const models::Model& model, std::vector<std::string> notes, const std::string& model_type);

std::string shape_text(const std::vector<int64_t>& shape);
// Export helpers: the shortest decimal that reads back as the same float (0.1f -> 0.1, not
// 0.10000000149011612), a float32 safetensors tensor, and a tensor's values in row-major order.
double shortest(float v);
io::StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values);
std::vector<float> values_of(const Tensor& t);
// `t` (any shape) as a float32 safetensors tensor named `name`.
io::StTensor f32_tensor_of(const std::string& name, const Tensor& t);
// An empty safetensors file as transformers reads it (metadata "format": "pt"; it refuses files
// without).
io::StFile hf_safetensors_file();
// dst (rows, cols) row-major = the transpose of the column block [col0, col0 + rows) of src (in, out).
void transpose_block(const std::vector<float>& src, int64_t in, int64_t out, int64_t col0, int64_t rows, Tensor& dst);
void copy_into(const std::vector<float>& src, int64_t offset, Tensor& dst);
int64_t count_parameters(const models::Model& model);

// The files of `names` that exist in `dir`, in that order.
std::vector<std::string> existing_files(const std::string& dir, const std::vector<std::string>& names);

// What an export writes: the weights, config.json, generation_config.json (none when empty, as for
// GPT-2) and the tokenizer files of the checkpoint, copied as they are.
struct HfExportFiles {
  io::StFile weights;
  std::string config_json;
  std::string generation_config_json;
  std::vector<std::string> tokenizer_files;
};
// Writes `files` into out_dir all-or-nothing and says what was written (`model_type`, the class
// `hf_class` that loads it, the parameters of `model`, `notes`).
HfConversion write_hf_export(const std::string& checkpoint_dir, const std::string& out_dir, const models::Model& model,
                             const std::string& model_type, const std::string& hf_class, const HfExportFiles& files,
                             std::vector<std::string> notes = {});

}  // namespace qkv::interop
