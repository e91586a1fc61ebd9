#include "qkv/models/checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "qkv/io/tensor_file.h"

namespace qkv::models {

namespace fs = std::filesystem;

namespace {
// Index of the first NaN/Inf of an f32 tensor, or -1.
int64_t first_non_finite(const Tensor& t) {
  const Tensor c = t.contiguous().to(Device::cpu());
  const float* p = c.f32();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

void check_finite(const std::string& where, const std::string& name, const Tensor& t) {
  const int64_t bad = first_non_finite(t);
  QKV_CHECK(bad < 0, where << ": tensor '" << name << "' holds a non-finite value ("
                           << t.contiguous().to(Device::cpu()).f32()[bad]
                           << " at element " << bad << "): the weights diverged or the file is damaged");
}
}  // namespace

std::string first_non_finite_parameter(const Model& model) {
  for (const auto& [name, var] : model.named_parameters())
    if (first_non_finite(var.value()) >= 0) return name;
  return "";
}

std::string lm_tokenizer_path(const std::string& dir) {
  for (const char* name : {kLmSpmFile, kLmBpeFile})
    if (fs::exists(dir + "/" + name)) return dir + "/" + name;
  return "";
}

void check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw NotFoundError(dir + ": checkpoint directory does not exist");
  QKV_CHECK(fs::is_directory(dir, ec), dir << ": not a directory (a checkpoint is a directory with config.json and "
                                              "model.safetensors)");
}

void write_model_files(io::StagedDirectory& dir, const Model& model, int64_t step) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, var] : model.named_parameters()) {
    check_finite(dir.target(), name, var.value());
    tensors.emplace_back(name, var.value());
  }
  for (auto& buffer : model.named_buffers()) tensors.push_back(std::move(buffer));
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"producer", "qkv " QKV_VERSION}};
  if (step >= 0) metadata["step"] = std::to_string(step);
  io::save_tensors(dir.path("model.safetensors"), tensors, metadata);
  dir.write("config.json", config_to_json(model.config()));
}

void save_model(const std::string& dir, const Model& model) {
  io::StagedDirectory staged(dir);
  write_model_files(staged, model);
  staged.commit();
}

namespace {
// The config.json field that makes parameter `name` the second name of another one (the encoder's
// table comes first, so with share_embeddings the decoder's is the second name).
const char* tying_field(const std::string& name) {
  return name.rfind("decoder_embedding.", 0) == 0 ? "share_embeddings" : "tie_output_embedding";
}
}  // namespace

void load_weights(const std::string& path, Model& model) {
  io::TensorFile file = io::load_tensors(path);
  // A tied parameter is listed under two names (as in PyTorch's state_dict): the first name loads
  // it; a copy under the second must hold the same matrix, or the file was written by an untied
  // model and one of the two would be silently dropped.
  std::map<const void*, std::string> loaded;  // parameter cell -> the name it was loaded under
  for (auto& [name, var] : model.named_parameters()) {
    const auto first = loaded.find(var.cell().get());
    if (first == loaded.end()) {
      file.take_into(name, var.value());
      check_finite(path, name, var.value());
      loaded.emplace(var.cell().get(), name);
      continue;
    }
    if (!file.has(name)) continue;
    const Tensor copy = file.take(name);
    const Tensor& shared = var.value();
    QKV_CHECK(copy.numel() == shared.numel() && std::memcmp(copy.contiguous().f32(), shared.contiguous().f32(),
                                                            sizeof(float) * static_cast<size_t>(shared.numel())) == 0,
              path << ": config says " << tying_field(name) << ": true, but '" << name << "' differs from '"
                   << first->second << "' (weights of an untied model?)");
  }
  // Buffers are recomputed from the config; a stored copy is accepted if its size fits.
  for (const auto& [name, ours] : model.named_buffers()) {
    if (!file.has(name)) continue;
    const Tensor stored = file.take(name);
    QKV_CHECK(stored.numel() == ours.numel(),
              path << ": tensor '" << name << "' has shape " << stored.shape() << ", expected " << ours.shape());
  }
  file.expect_all_taken();
}

std::unique_ptr<Model> make_model(const TransformerConfig& config, uint64_t seed) {
  if (config.decoder_only()) return std::make_unique<CausalLM>(config, seed);
  if (config.encoder_only()) return std::make_unique<EncoderModel>(config, seed);
  return std::make_unique<Transformer>(config, seed);
}

std::unique_ptr<Model> load_model(const std::string& dir, uint64_t seed) {
  check_checkpoint_dir(dir);
  std::unique_ptr<Model> model;
  {
    // load_weights sets every parameter (a missing one is an error), so drawing random values
    // first would be wasted: it was 70% of loading MiniLM (0.75 of 1.05 s).
    const nn::SkipRandomInitGuard no_init;
    model = make_model(load_config(dir + "/config.json"), seed);
  }
  load_weights(dir + "/model.safetensors", *model);
  // After loading, so a damaged file gets the reader's precise message (tensor, byte offset); what
  // the manifest adds is catching files that are each valid but come from different saves.
  io::verify_manifest(dir);
  return model;
}

namespace {
template <class Family>
std::unique_ptr<Family> load_family(const std::string& dir, uint64_t seed, const char* wanted, const char* use) {
  check_checkpoint_dir(dir);
  const TransformerConfig config = load_config(dir + "/config.json");
  const auto article = [](const std::string& a) { return a[0] == 'e' ? "an " : "a "; };
  QKV_CHECK(config.architecture == wanted, dir << ": this is " << article(config.architecture) << config.architecture
                                               << " checkpoint; " << use << " needs " << article(wanted) << wanted
                                               << " model");
  std::unique_ptr<Model> model = load_model(dir, seed);
  return std::unique_ptr<Family>(static_cast<Family*>(model.release()));
}
}  // namespace

std::unique_ptr<Transformer> load_seq2seq(const std::string& dir, uint64_t seed) {
  return load_family<Transformer>(dir, seed, kEncoderDecoder, "translation");
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, uint64_t seed) {
  return load_family<CausalLM>(dir, seed, kDecoderOnly, "generation");
}

std::unique_ptr<EncoderModel> load_encoder(const std::string& dir, const char* use, uint64_t seed) {
  return load_family<EncoderModel>(dir, seed, kEncoderOnly, use);
}

}  // namespace qkv::models
