#include "qkv/models/checkpoint.h"

#include <filesystem>

#include "qkv/io/tensor_file.h"

namespace qkv::models {

namespace fs = std::filesystem;

namespace {
constexpr const char* kPeName = "positional_encoding.pe";
}

void save_model(const std::string& dir, const Transformer& model) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  QKV_CHECK(!ec, dir << ": cannot create checkpoint directory: " << ec.message());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, var] : model.named_parameters()) tensors.emplace_back(name, var.value());
  // The seed registers pe as a persistent buffer of shape (1, max_len, D).
  const Tensor& pe = model.positional_encoding.pe;
  tensors.emplace_back(kPeName, pe.reshape(Dims{1, pe.size(0), pe.size(1)}));
  io::save_tensors(dir + "/model.safetensors", tensors, {{"format", "pt"}, {"producer", "qkv " QKV_VERSION}});
  save_config(dir + "/config.json", model.config());
}

void load_weights(const std::string& path, Transformer& model) {
  io::TensorFile file = io::load_tensors(path);
  for (auto& [name, var] : model.named_parameters()) file.take_into(name, var.value());
  // pe is recomputed from the config; a stored copy is accepted if its shape fits.
  if (file.has(kPeName)) {
    const Tensor pe = file.take(kPeName);
    const Tensor& ours = model.positional_encoding.pe;
    QKV_CHECK(pe.numel() == ours.numel(), path << ": tensor '" << kPeName << "' has shape " << pe.shape()
                                               << ", expected (1, " << ours.size(0) << ", " << ours.size(1) << ")");
  }
  file.expect_all_taken();
}

std::unique_ptr<Transformer> load_model(const std::string& dir, uint64_t seed) {
  QKV_CHECK(fs::is_directory(dir), dir << ": checkpoint directory does not exist");
  auto model = std::make_unique<Transformer>(load_config(dir + "/config.json"), seed);
  load_weights(dir + "/model.safetensors", *model);
  return model;
}

}  // namespace qkv::models
