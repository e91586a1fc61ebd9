#include "qkv/interop/hf_common.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "qkv/io/checkpoint_dir.h"
#include "qkv/text/tokenizer_json.h"

namespace qkv::interop {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open for reading");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

json parse_json_object(const std::string& path, const std::string& what) { return text::read_json_object(path, what); }

json parse_hf_config(const std::string& config_path) { return parse_json_object(config_path, "a Hugging Face config.json"); }

std::string hf_weights_path(const std::string& hf_dir) {
  std::error_code ec;
  QKV_CHECK(fs::is_directory(hf_dir, ec), hf_dir << ": not a directory (a Hugging Face model directory holds "
                                                     "config.json and model.safetensors)");
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  QKV_CHECK(fs::exists(config_path, ec), config_path << ": missing (a Hugging Face model directory holds config.json)");
  const std::string weights_path = hf_dir + "/" + kHfWeightsFile;
  if (!fs::exists(weights_path, ec)) {
    QKV_CHECK(!fs::exists(hf_dir + "/model.safetensors.index.json", ec),
              weights_path << ": missing; sharded checkpoints (model.safetensors.index.json) are not supported");
    if (fs::exists(hf_dir + "/pytorch_model.bin", ec)) {
      // Name the model's own class so that the command can be pasted as is.
      std::string cls = "AutoModel";
      try {
        const nlohmann::json config = parse_hf_config(config_path);
        if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
            config["architectures"][0].is_string())
          cls = config["architectures"][0].get<std::string>();
      } catch (const Error&) {
      }
      QKV_CHECK(false, weights_path << ": missing; the directory has pytorch_model.bin, which qkv does not read "
                                       "(a pickle). Convert it once with: python3 -c \"import transformers; "
                                       "transformers." << cls << ".from_pretrained('" << hf_dir << "').save_pretrained('"
                                    << hf_dir << "', safe_serialization=True)\"");
    }
    QKV_CHECK(false, weights_path << ": missing (qkv reads safetensors only; save the model with "
                                     "save_pretrained(..., safe_serialization=True))");
  }
  return weights_path;
}

double shortest(float v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::stod(std::string(buf, res.ptr));
}

io::StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  io::StTensor t;
  t.name = name;
  t.dtype = io::StDtype::F32;
  t.shape = shape;
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::vector<float> values_of(const Tensor& t) { return t.contiguous().to_vector(); }

io::StTensor f32_tensor_of(const std::string& name, const Tensor& t) {
  return f32_tensor(name, std::vector<int64_t>(t.shape().begin(), t.shape().end()), values_of(t));
}

io::StFile hf_safetensors_file() {
  io::StFile file;
  file.metadata["format"] = "pt";
  return file;
}

void describe_import(HfConversion* info, const models::TransformerConfig& config, const HfWeights& weights,
                     const models::Model& model, std::vector<std::string> notes, const std::string& model_type) {
  if (!info) return;
  info->config = config;
  info->weights_dtype = weights.dtype_summary();
  info->parameters = count_parameters(model);
  info->notes = std::move(notes);
  info->model_type = model_type;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

HfWeights::HfWeights(const std::string& path, const std::vector<std::string>& prefixes,
                     std::function<bool(const std::string&)> ignorable, std::string what)
    : path_(path), ignorable_(std::move(ignorable)), what_(std::move(what)) {
  file_ = io::read_safetensors(path, io::StReadOptions{.allow_half = true});
  for (io::StTensor& t : file_.tensors) {
    std::string name = t.name;
    for (const std::string& prefix : prefixes)
      if (name.rfind(prefix, 0) == 0) {
        name = name.substr(prefix.size());
        break;
      }
    QKV_CHECK(by_name_.emplace(name, &t).second,
              path << ": tensor '" << t.name << "' is given twice, with and without a prefix");
    if (t.dtype == io::StDtype::F32 || t.dtype == io::StDtype::F16 || t.dtype == io::StDtype::BF16)
      dtypes_.insert(io::st_dtype_name(t.dtype));  // integer buffers (position_ids) are not weights
  }
}

std::vector<float> HfWeights::take(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) {
  const auto it = by_name_.find(name);
  QKV_CHECK(it != by_name_.end(), path_ << ": tensor '" << name << "' is missing (expected " << shape_text(shape) << ", "
                                        << why << ")");
  io::StTensor& t = *it->second;
  QKV_CHECK(t.dtype == io::StDtype::F32 || t.dtype == io::StDtype::F16 || t.dtype == io::StDtype::BF16,
            path_ << ": tensor '" << t.name << "' has dtype " << io::st_dtype_name(t.dtype)
                  << ", expected a float tensor (F32, F16 or BF16)");
  QKV_CHECK(t.shape == shape, path_ << ": tensor '" << t.name << "' has shape " << shape_text(t.shape) << ", expected "
                                    << shape_text(shape) << " (" << why << ")");
  io::widen_half_to_f32(t, path_);
  std::vector<float> values(t.bytes.size() / sizeof(float));
  std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
  for (size_t i = 0; i < values.size(); ++i)
    QKV_CHECK(std::isfinite(values[i]), path_ << ": tensor '" << t.name << "' holds a non-finite value (" << values[i]
                                              << " at element " << i << ")");
  taken_.insert(name);
  return values;
}

void HfWeights::expect_all_taken() const {
  for (const auto& [name, t] : by_name_)
    QKV_CHECK(taken_.count(name) || (ignorable_ && ignorable_(name)),
              path_ << ": tensor '" << t->name << "' is not part of " << what_ << "; qkv does not know what to do with it");
}

std::string HfWeights::dtype_summary() const {
  if (dtypes_.size() == 1) return *dtypes_.begin();
  return dtypes_.empty() ? "none" : "mixed";
}

void transpose_block(const std::vector<float>& src, int64_t in, int64_t out, int64_t col0, int64_t rows, Tensor& dst) {
  float* d = dst.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i) d[r * in + i] = src[static_cast<size_t>(i * out + col0 + r)];
}

void copy_into(const std::vector<float>& src, int64_t offset, Tensor& dst) {
  QKV_CHECK(offset + dst.numel() <= static_cast<int64_t>(src.size()), "copy_into: source too small");
  std::memcpy(dst.f32(), src.data() + offset, sizeof(float) * static_cast<size_t>(dst.numel()));
}

int64_t count_parameters(const models::Model& model) {
  int64_t n = 0;
  for (const Var& v : model.parameters()) n += v.value().numel();
  return n;
}

std::vector<std::string> existing_files(const std::string& dir, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const std::string& name : names)
    if (fs::exists(dir + "/" + name, ec)) out.push_back(name);
  return out;
}

HfConversion write_hf_export(const std::string& checkpoint_dir, const std::string& out_dir, const models::Model& model,
                             const std::string& model_type, const std::string& hf_class, const HfExportFiles& files,
                             std::vector<std::string> notes) {
  HfConversion info;
  info.config = model.config();
  info.weights_dtype = "F32";
  info.parameters = count_parameters(model);
  info.model_type = model_type;
  info.hf_class = hf_class;
  info.tokenizer = !files.tokenizer_files.empty();
  info.tokenizer_files = files.tokenizer_files;
  info.notes = std::move(notes);
  io::StagedDirectory staged(out_dir);
  io::write_safetensors(staged.path(kHfWeightsFile), files.weights);
  staged.write(kHfConfigFile, files.config_json);
  if (!files.generation_config_json.empty()) staged.write("generation_config.json", files.generation_config_json);
  for (const std::string& name : files.tokenizer_files) staged.copy_from(name, checkpoint_dir + "/" + name);
  staged.commit();
  return info;
}

void validate_read_config(const std::string& config_path, const models::TransformerConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(config_path + ": " + e.what());
  }
}

}  // namespace qkv::interop
