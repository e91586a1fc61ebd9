#include "qkv/models/checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "qkv/io/tensor_file.h"

namespace qkv::models {

namespace fs = std::filesystem;

namespace {
constexpr const char* kPeName = "positional_encoding.pe";
constexpr const char* kOutputWeight = "fc.weight";
constexpr const char* kDecoderEmbedding = "decoder_embedding.weight";

// Index of the first NaN/Inf of an f32 tensor, or -1.
int64_t first_non_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.f32();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

void check_finite(const std::string& where, const std::string& name, const Tensor& t) {
  const int64_t bad = first_non_finite(t);
  QKV_CHECK(bad < 0, where << ": tensor '" << name << "' holds a non-finite value (" << t.contiguous().f32()[bad]
                           << " at element " << bad << "): the weights diverged or the file is damaged");
}
}  // namespace

std::string first_non_finite_parameter(const Transformer& model) {
  for (const auto& [name, var] : model.named_parameters())
    if (first_non_finite(var.value()) >= 0) return name;
  return "";
}

void check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  QKV_CHECK(fs::exists(dir, ec), dir << ": checkpoint directory does not exist");
  QKV_CHECK(fs::is_directory(dir, ec), dir << ": not a directory (a checkpoint is a directory with config.json and "
                                              "model.safetensors)");
}

void write_model_files(io::StagedDirectory& dir, const Transformer& model, int64_t step) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, var] : model.named_parameters()) {
    check_finite(dir.target(), name, var.value());
    tensors.emplace_back(name, var.value());
  }
  // The seed registers pe as a persistent buffer of shape (1, max_len, D).
  const Tensor& pe = model.positional_encoding.pe;
  tensors.emplace_back(kPeName, pe.reshape(Dims{1, pe.size(0), pe.size(1)}));
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"producer", "qkv " QKV_VERSION}};
  if (step >= 0) metadata["step"] = std::to_string(step);
  io::save_tensors(dir.path("model.safetensors"), tensors, metadata);
  dir.write("config.json", config_to_json(model.config()));
}

void save_model(const std::string& dir, const Transformer& model) {
  io::StagedDirectory staged(dir);
  write_model_files(staged, model);
  staged.commit();
}

void load_weights(const std::string& path, Transformer& model) {
  io::TensorFile file = io::load_tensors(path);
  const bool tied = model.config().tie_output_embedding;
  for (auto& [name, var] : model.named_parameters()) {
    if (tied && name == kOutputWeight) continue;  // the same Var as the decoder embedding: checked below
    file.take_into(name, var.value());
    check_finite(path, name, var.value());
  }
  if (tied && file.has(kOutputWeight)) {
    // A tied model's state_dict holds the shared matrix under both names; two different matrices
    // mean the file was written by an untied model and one of them would be silently dropped.
    const Tensor out = file.take(kOutputWeight);
    const Tensor& emb = model.decoder_embedding.weight.value();
    QKV_CHECK(out.numel() == emb.numel() && std::memcmp(out.contiguous().f32(), emb.contiguous().f32(),
                                                        sizeof(float) * static_cast<size_t>(emb.numel())) == 0,
              path << ": config says tie_output_embedding: true, but '" << kOutputWeight << "' differs from '"
                   << kDecoderEmbedding << "' (weights of an untied model?)");
  }
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
  check_checkpoint_dir(dir);
  auto model = std::make_unique<Transformer>(load_config(dir + "/config.json"), seed);
  load_weights(dir + "/model.safetensors", *model);
  // After loading, so a damaged file gets the reader's precise message (tensor, byte offset); what
  // the manifest adds is catching files that are each valid but come from different saves.
  io::verify_manifest(dir);
  return model;
}

}  // namespace qkv::models
